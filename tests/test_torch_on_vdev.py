"""dp_torch on four virtual devices (vdev:0..3): placement, numbers and errors on distinct devices.

The vdev backend is process-global, so the checks run once in a child process (module fixture)
and each test asserts one check's result.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent(
    r'''
    import copy, json, traceback
    import torch
    from torch import nn
    import dp_torch
    from dp_torch import virtual

    devs = virtual.install(4)
    results = {}

    def check(fn):
        try:
            fn()
            results[fn.__name__] = "ok"
        except Exception:
            results[fn.__name__] = traceback.format_exc()
        return fn

    def model(seed):
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(5, 8), nn.BatchNorm1d(8), nn.Tanh(), nn.Linear(8, 3))

    @check
    def scatter_puts_chunk_i_on_device_i():
        chunks = dp_torch.scatter(torch.randn(7, 2), devs)
        assert [c.device for c in chunks] == devs and [len(c) for c in chunks] == [2, 2, 2, 1]

    @check
    def replica_j_holds_parameters_and_buffers_on_device_j():
        replicas = dp_torch.replicate(model(0).to(devs[0]), devs[:3])
        for j, replica in enumerate(replicas):
            assert replica[0].weight.device == devs[j] and replica[1].running_mean.device == devs[j]

    @check
    def outputs_and_gradients_match_cpu_and_gradients_land_on_device_0():
        net, ref = model(1), model(1)
        net.eval(); ref.eval()
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

    @check
    def batchnorm_running_stats_come_from_chunk_0():
        net, ref = model(2), model(2)
        net.to(devs[0])
        x = torch.randn(9, 5)
        dp_torch.DataParallel(net, devs[:3])(x.to(devs[0]))
        ref(x[:3])
        torch.testing.assert_close(net[1].running_mean.cpu(), ref[1].running_mean)

    @check
    def gather_lands_on_the_output_device():
        out = dp_torch.DataParallel(nn.Identity(), devs, output_device=devs[2])(torch.randn(8, 1))
        assert out.device == devs[2]

    @check
    def default_device_ids_are_all_virtual_devices():
        assert dp_torch.DataParallel(nn.Identity()).device_ids == devs

    @check
    def missing_device_is_a_clear_error():
        try:
            dp_torch.DataParallel(nn.Identity(), [devs[0], "vdev:9"])
        except ValueError as err:
            assert "device_ids[1]='vdev:9' names vdev:9, which does not exist" in str(err), err
        else:
            raise AssertionError("no error")

    @check
    def module_off_device_ids_0_is_pytorchs_error():
        try:
            dp_torch.DataParallel(nn.Linear(1, 1).to(devs[1]), devs[:2])(torch.randn(2, 1))
        except RuntimeError as err:
            assert str(err).endswith("on device vdev:0 (device_ids[0]) but found one of them on device: vdev:1"), err
        else:
            raise AssertionError("no error")

    print(json.dumps(results))
    '''
)

CHECKS = [
    "scatter_puts_chunk_i_on_device_i",
    "replica_j_holds_parameters_and_buffers_on_device_j",
    "outputs_and_gradients_match_cpu_and_gradients_land_on_device_0",
    "batchnorm_running_stats_come_from_chunk_0",
    "gather_lands_on_the_output_device",
    "default_device_ids_are_all_virtual_devices",
    "missing_device_is_a_clear_error",
    "module_off_device_ids_0_is_pytorchs_error",
]


@pytest.fixture(scope="module")
def results() -> dict[str, str]:
    child = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, child.stderr[-4000:]
    return json.loads(child.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", CHECKS)
def test_on_virtual_devices(results, name):
    assert results[name] == "ok", results[name]
