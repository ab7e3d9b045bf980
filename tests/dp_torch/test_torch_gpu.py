"""dp_torch against the real torch.nn.DataParallel on CUDA (skipped without a GPU)."""
from __future__ import annotations

import pytest
import torch
from _helpers_torch import assert_same_grads, mlp, twin
from torch import nn

import dp_torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(torch.cuda.device_count() == 0, reason="needs a CUDA GPU"),
]


def _all_cuda_ids() -> list[int]:
    return list(range(torch.cuda.device_count()))


@pytest.mark.parametrize("batch", [1, 5, 16])
def test_matches_torch_data_parallel_on_all_gpus(batch):
    ours = mlp(0, batchnorm=True).cuda()
    theirs = twin(ours)
    x = torch.randn(max(batch, 2 * len(_all_cuda_ids())), 5, device="cuda:0")
    out = dp_torch.DataParallel(ours, _all_cuda_ids())(x)
    ref = nn.DataParallel(theirs, _all_cuda_ids())(x)
    torch.testing.assert_close(out, ref)
    out.square().sum().backward()
    ref.square().sum().backward()
    assert_same_grads(ours, theirs)
    torch.testing.assert_close(ours[1].running_mean, theirs[1].running_mean)


def test_default_device_ids_are_all_cuda_devices():
    wrapper = dp_torch.DataParallel(nn.Linear(1, 1).cuda())
    assert wrapper.device_ids == [torch.device("cuda", i) for i in _all_cuda_ids()]


def test_replica_0_aliases_the_original_on_cuda():
    net = mlp(1).cuda()
    replicas = dp_torch.replicate(net, ["cuda:0", "cuda:0"])
    assert replicas[0][0].weight.data_ptr() == net[0].weight.data_ptr()
    assert replicas[1][0].weight.data_ptr() != net[0].weight.data_ptr()


def test_mixed_cuda_and_cpu_devices_match_the_single_device_module():
    net = mlp(2).cuda()
    ref = twin(net)
    x = torch.randn(6, 5, device="cuda:0")
    out = dp_torch.DataParallel(net, ["cuda:0", "cpu"], output_device="cuda:0")(x)
    assert out.device == torch.device("cuda:0")
    torch.testing.assert_close(out, ref(x))
    out.sum().backward()
    ref(x).sum().backward()
    assert_same_grads(net, ref)


def test_autocast_dtype_reaches_cuda_worker_threads():
    nets = [nn.Linear(4, 4).cuda(), nn.Linear(4, 4).cuda()]
    x = torch.randn(2, 4, device="cuda:0")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        outputs = dp_torch.parallel_apply(nets, [x, x], devices=["cuda:0", "cuda:0"])
    assert [o.dtype for o in outputs] == [torch.bfloat16] * 2


def test_cpu_input_is_scattered_onto_the_gpus():
    x = torch.randn(4, 3)
    chunks = dp_torch.scatter(x, _all_cuda_ids())
    assert all(c.device.type == "cuda" for c in chunks)
    torch.testing.assert_close(torch.cat([c.cpu() for c in chunks]), x)


def test_stock_cuda_gather_casts_to_replica_0s_dtype_where_dp_torch_raises():
    # docs/divergences.md 23, checked against the real C++ comm.gather rather than the CPU oracle.
    parts = [torch.randn(2, 3, device="cuda:0"), torch.randn(1, 3, device="cuda:0", dtype=torch.float64)]
    theirs = torch.nn.parallel.gather(parts, 0)
    assert theirs.dtype == torch.float32
    torch.testing.assert_close(theirs, torch.cat([parts[0], parts[1].float()]))
    with pytest.raises(TypeError, match="every replica must return the same dtype"):
        dp_torch.gather(parts, "cuda:0")


def test_autocast_cache_flag_reaches_cuda_worker_threads():
    class CacheProbe(nn.Module):
        def forward(self, x):
            return torch.full((1,), float(torch.is_autocast_cache_enabled()), device=x.device)

    x = torch.randn(2, 4, device="cuda:0")
    with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
        outputs = dp_torch.parallel_apply([CacheProbe(), CacheProbe()], [x, x], devices=["cuda:0", "cuda:0"])
    assert [o.item() for o in outputs] == [0.0, 0.0]
