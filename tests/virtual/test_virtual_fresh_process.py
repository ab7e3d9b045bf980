"""install() in fresh processes: what happened before it must not matter, or must fail clearly."""
from _helpers_virtual import run_python


def test_install_after_a_cpu_backward_still_gives_working_backward_on_every_device():
    result = run_python("""
        import torch
        from dp_torch import virtual
        w = torch.randn(3, requires_grad=True)
        (w * 2).sum().backward()             # CPU backward first: sizes autograd's queues
        devices = virtual.install(4)
        for d in devices:
            v = torch.randn(3, device=d, requires_grad=True)
            (v * v).sum().backward()
            assert v.grad.device == d and torch.allclose(v.grad.cpu(), 2 * v.detach().cpu())
        print("ok")
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_devices_before_install_and_install_over_a_named_privateuse1_raise_clearly():
    result = run_python("""
        import torch
        from dp_torch import virtual
        try:
            virtual.devices()
        except RuntimeError as e:
            print(e)
        torch.utils.rename_privateuse1_backend("otherdev")
        try:
            virtual.install(2)
        except RuntimeError as e:
            print(e)
        print(virtual.is_installed())
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "virtual.devices(): no virtual devices; call virtual.install() first",
        "virtual.install(name='vdev'): PyTorch's PrivateUse1 backend is already named "
        "'otherdev' in this process, and it can be named only once",
        "False",
    ]
