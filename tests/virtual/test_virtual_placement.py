"""dp_torch placement on distinct virtual devices, and a planted bug only vdevs can see."""
import pytest
import torch
from _helpers_virtual import misplaced, on_device, replica_tensors, tensors_of, vdev
from _zoo_torch import MLP, MODELS, Tied, make_model
from torch import nn

import dp_torch
from dp_torch import virtual

SAME_DEVICE = "Expected all tensors to be on the same device, but found at least two devices"


@pytest.mark.parametrize("detach", [False, True])
@pytest.mark.parametrize("n", [1, 2, 4])
@pytest.mark.parametrize("model", MODELS)
def test_replica_i_holds_every_parameter_and_buffer_on_vdev_i(model, n, detach):
    original = on_device(make_model(model, seed=n), vdev(0))
    devices = virtual.devices()[:n]
    replicas = dp_torch.replicate(original, devices, detach=detach)
    assert len(replicas) == n
    assert misplaced(original, replicas, devices) == []
    originals = tensors_of(original)
    for replica in replicas:
        copies = replica_tensors(original, replica)
        assert copies.keys() == originals.keys()
        for name, t in copies.items():
            torch.testing.assert_close(t.cpu(), originals[name].cpu(), rtol=0, atol=0)


def test_replica_0_aliases_the_original_and_the_others_are_separate_copies():
    original = on_device(MLP(), vdev(0))
    replicas = dp_torch.replicate(original, virtual.devices()[:3])
    weights = [r.fc1.weight for r in replicas]
    assert virtual.shares_memory(weights[0], original.fc1.weight)
    assert not virtual.shares_memory(weights[1], original.fc1.weight)
    assert not virtual.shares_memory(weights[1], weights[2])


def test_tied_weights_stay_tied_within_each_replica():
    original = on_device(Tied(), vdev(0))
    for replica in dp_torch.replicate(original, virtual.devices()):
        assert replica.encode.weight is replica.decode.weight


@pytest.mark.parametrize("batch, n, sizes", [(8, 4, [2, 2, 2, 2]), (5, 4, [2, 2, 1]),
                                             (13, 3, [5, 5, 3]), (1, 2, [1])])
def test_scatter_puts_chunk_i_on_vdev_i_in_nested_inputs(batch, n, sizes):
    x, mask = torch.randn(batch, 3), torch.rand(batch) > 0.5
    chunks = dp_torch.scatter((x, {"mask": mask, "tag": "keep"}), virtual.devices()[:n])
    assert len(chunks) == len(sizes)
    for i, (cx, extras) in enumerate(chunks):
        assert cx.device == extras["mask"].device == vdev(i)
        assert cx.shape[0] == extras["mask"].shape[0] == sizes[i]
        assert extras["tag"] == "keep"
    torch.testing.assert_close(torch.cat([c[0].cpu() for c in chunks]), x)


def test_scatter_kwargs_places_kwargs_chunks_like_args():
    args, kwargs = dp_torch.scatter_kwargs((torch.randn(6, 2),), {"w": torch.randn(6)},
                                           virtual.devices()[:3])
    assert [a[0].device for a in args] == [k["w"].device for k in kwargs] == virtual.devices()[:3]


@pytest.mark.parametrize("target", ["vdev:2", "vdev:0", "cpu"])
def test_gather_puts_nested_outputs_on_the_output_device(target):
    outputs = [{"y": torch.full((2, 3), float(i), device=vdev(i)),
                "aux": (torch.ones(2, device=vdev(i)),)} for i in range(3)]
    gathered = dp_torch.gather(outputs, target)
    assert gathered["y"].device == gathered["aux"][0].device == torch.device(target)
    expected = torch.cat([torch.full((2, 3), float(i)) for i in range(3)])
    torch.testing.assert_close(gathered["y"].cpu(), expected)


def test_parallel_apply_surfaces_a_missed_to_as_the_same_device_error():
    replicas = [on_device(nn.Linear(3, 2), vdev(i)) for i in range(2)]
    inputs = [torch.randn(2, 3, device=vdev(0)), torch.randn(2, 3, device=vdev(0))]  # 2nd wrong
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        dp_torch.parallel_apply(replicas, inputs, devices=virtual.devices()[:2])


def test_data_parallel_outputs_on_output_device_and_grads_on_device_0():
    torch.manual_seed(9)
    model = on_device(MLP(), vdev(0))
    dp = dp_torch.DataParallel(model, device_ids=virtual.devices()[:3], output_device=vdev(2))
    out = dp(torch.randn(7, 6))
    assert out.device == vdev(2)
    out.sum().backward()
    assert {p.grad.device for p in model.parameters()} == {vdev(0)}


# --- Planted bug: replica j's fc2 is replica 0's. Devices that all read "cpu" cannot see it. ---

def _replicate_sharing_fc2(module, devices, detach=False):
    replicas = dp_torch.replicate(module, devices, detach)
    for replica in replicas[1:]:
        replica.fc2 = replicas[0].fc2
    return replicas


@pytest.mark.parametrize("n", [2, 3])
def test_planted_shared_submodule_passes_on_cpu_devices_but_fails_on_vdevs(n):
    cpu_devices = [torch.device("cpu")] * n
    cpu_model = MLP()
    assert misplaced(cpu_model, _replicate_sharing_fc2(cpu_model, cpu_devices), cpu_devices) == []

    v_model = on_device(cpu_model, vdev(0))
    vdevs = virtual.devices()[:n]
    problems = misplaced(v_model, _replicate_sharing_fc2(v_model, vdevs), vdevs)
    assert problems == [f"replica {j}: fc2.{p} on vdev:0, expected vdev:{j}"
                        for j in range(1, n) for p in ("weight", "bias")]


def test_planted_bug_crashes_a_vdev_forward_where_cpu_runs_silently():
    class BrokenDataParallel(dp_torch.DataParallel):
        def replicate(self, module, device_ids):
            return _replicate_sharing_fc2(module, device_ids, not torch.is_grad_enabled())

    x = torch.randn(6, 6)
    cpu_out = BrokenDataParallel(MLP(), device_ids=["cpu"] * 2)(x)
    assert cpu_out.shape == (6, 3)  # the bug is invisible here
    v_dp = BrokenDataParallel(on_device(MLP(), vdev(0)), device_ids=virtual.devices()[:2])
    with pytest.raises(RuntimeError, match=f"(?s)in replica 1 .*{SAME_DEVICE}, vdev:0 and vdev:1!"):
        v_dp(x)
