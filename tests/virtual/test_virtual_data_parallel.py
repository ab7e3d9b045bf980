"""dp_torch on four virtual devices (vdev:0..3): placement, numbers and errors on distinct devices.

These were one string of code run in a child process from the main suite, with a hand-kept list
of its check names; tests/virtual already runs in a process of its own with vdev:0..3 installed.
"""
import pytest
import torch
from torch import nn

import dp_torch
from dp_torch import virtual


def bn_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(5, 8), nn.BatchNorm1d(8), nn.Tanh(), nn.Linear(8, 3))


def test_scatter_puts_chunk_i_on_device_i():
    devs = virtual.devices()
    chunks = dp_torch.scatter(torch.randn(7, 2), devs)
    assert [c.device for c in chunks] == devs and [len(c) for c in chunks] == [2, 2, 2, 1]


def test_replica_j_holds_parameters_and_buffers_on_device_j():
    devs = virtual.devices()
    replicas = dp_torch.replicate(bn_model(0).to(devs[0]), devs[:3])
    for j, replica in enumerate(replicas):
        assert replica[0].weight.device == devs[j] and replica[1].running_mean.device == devs[j]


def test_outputs_and_gradients_match_cpu_and_gradients_land_on_device_0():
    devs = virtual.devices()
    net, ref = bn_model(1).eval(), bn_model(1).eval()
    net.to(devs[0])
    x = torch.randn(7, 5)
    out = dp_torch.DataParallel(net, devs[:3], output_device="cpu")(x)
    assert out.device == torch.device("cpu")
    torch.testing.assert_close(out, ref(x))
    out.square().sum().backward()
    ref(x).square().sum().backward()
    for p, r in zip(net.parameters(), ref.parameters()):
        assert p.grad.device == devs[0]
        torch.testing.assert_close(p.grad.cpu(), r.grad, atol=1e-5, rtol=1e-4)


def test_batchnorm_running_stats_come_from_chunk_0():
    devs = virtual.devices()
    net, ref = bn_model(2), bn_model(2)
    net.to(devs[0])
    x = torch.randn(9, 5)
    dp_torch.DataParallel(net, devs[:3])(x.to(devs[0]))
    ref(x[:3])
    torch.testing.assert_close(net[1].running_mean.cpu(), ref[1].running_mean)


def test_gather_lands_on_the_output_device():
    devs = virtual.devices()
    out = dp_torch.DataParallel(nn.Identity(), devs, output_device=devs[2])(torch.randn(8, 1))
    assert out.device == devs[2]


def test_default_device_ids_are_all_virtual_devices():
    assert dp_torch.DataParallel(nn.Identity()).device_ids == virtual.devices()


def test_missing_device_is_a_clear_error():
    with pytest.raises(ValueError, match=r"device_ids\[1\]='vdev:9' names vdev:9, which does not exist"):
        dp_torch.DataParallel(nn.Identity(), [virtual.devices()[0], "vdev:9"])


def test_module_off_device_ids_0_is_pytorchs_error():
    devs = virtual.devices()
    dp = dp_torch.DataParallel(nn.Linear(1, 1).to(devs[1]), devs[:2])
    with pytest.raises(RuntimeError, match=r"on device vdev:0 \(device_ids\[0\]\) but found one of them on "
                                           r"device: vdev:1$"):
        dp(torch.randn(2, 1))
