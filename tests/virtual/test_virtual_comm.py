"""The comm stand-ins: faithful to torch/csrc/cuda/comm.cpp, and enough for stock DataParallel."""
import warnings

import pytest
import torch
from _chunks import torch_chunks
from _helpers_virtual import assert_close_to_cpu, on_device, vdev
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.nn.parallel import comm

from dp_torch import virtual

STAND_INS = ["_broadcast", "_broadcast_coalesced", "_scatter", "_gather"]


def test_stand_ins_exist_only_inside_the_block():
    assert not any(hasattr(torch._C, name) for name in STAND_INS)
    with virtual.stock_comm():
        assert all(callable(getattr(torch._C, name)) for name in STAND_INS)
    assert not any(hasattr(torch._C, name) for name in STAND_INS)


def test_stand_ins_are_removed_even_when_the_block_raises():
    with pytest.raises(KeyError):
        with virtual.stock_comm():
            raise KeyError("boom")
    assert not hasattr(torch._C, "_broadcast_coalesced")


def test_broadcast_returns_the_original_on_its_device_and_copies_elsewhere():
    x = torch.randn(3, 4, device=vdev(1))
    with virtual.stock_comm():
        out = comm.broadcast(x, [vdev(0), vdev(1), vdev(3)])
    assert [t.device for t in out] == [vdev(0), vdev(1), vdev(3)]
    assert out[1] is x
    for t in (out[0], out[2]):
        assert torch.equal(t.cpu(), x.cpu()) and not virtual.shares_memory(t, x)


def test_broadcast_coalesced_keeps_originals_for_device_0_and_copies_all_dtypes():
    torch.manual_seed(0)
    tensors = [torch.randn(2, 3, device=vdev(0)), torch.arange(4, device=vdev(0)),
               torch.randn(5, device=vdev(0)), torch.ones(1, dtype=torch.float64, device=vdev(0))]
    with virtual.stock_comm():
        outputs = comm.broadcast_coalesced(tensors, [0, 2, 3], buffer_size=64)
    assert all(a is b for a, b in zip(outputs[0], tensors))
    for device_index, copies in zip([2, 3], outputs[1:]):
        for original, copy in zip(tensors, copies):
            assert copy.device == vdev(device_index) and copy.dtype == original.dtype
            assert torch.equal(copy.cpu(), original.cpu())
            assert not copy.requires_grad


def test_coalesced_copies_share_a_flat_buffer_but_not_a_version_counter():
    a, b = torch.randn(3, device=vdev(0)), torch.randn(2, device=vdev(0))
    with virtual.stock_comm():
        _, (a1, b1) = comm.broadcast_coalesced([a, b], [0, 1])
    assert virtual.shares_memory(a1, b1)
    version_of_b1 = b1._version
    a1.add_(1)
    assert b1._version == version_of_b1


def test_broadcast_coalesced_rejects_tensors_off_the_first_device():
    with virtual.stock_comm(), pytest.raises(RuntimeError, match="tensor 1 is on vdev:2"):
        comm.broadcast_coalesced([torch.ones(1, device=vdev(0)), torch.ones(1, device=vdev(2))],
                                 [0, 1])


@pytest.mark.parametrize("batch, chunk_sizes", [(5, None), (7, [3, 3, 1]), (2, None)])
def test_scatter_keeps_source_device_chunks_as_views_and_copies_the_rest(batch, chunk_sizes):
    x = torch.randn(batch, 4, device=vdev(1))
    with virtual.stock_comm():
        chunks = comm.scatter(x, [0, 1, 2], chunk_sizes=chunk_sizes)
    expected = x.cpu().split(chunk_sizes) if chunk_sizes else x.cpu().chunk(3)
    assert len(chunks) == len(expected)
    for i, (chunk, want) in enumerate(zip(chunks, expected)):
        assert chunk.device == vdev(i) and torch.equal(chunk.cpu(), want)
        assert virtual.shares_memory(chunk, x) == (i == 1)


@pytest.mark.parametrize(("chunk_sizes", "error", "message"), [
    ([0, 5], RuntimeError, r"Chunk size must be positive: chunk_sizes\[0\]=0"),
    ([6, -1], RuntimeError, r"Chunk size must be positive: chunk_sizes\[1\]=-1"),
    ([2, 2], RuntimeError, r"given chunk sizes don't sum up to the tensor's size \(sum\(chunk_sizes\) == 4, "
                           r"but expected 5\)"),
    ([2.5, 2.5], TypeError, r"chunk_sizes\[0\]=2.5 is not an int"),
], ids=["zero", "negative", "wrong_sum", "float"])
def test_scatter_refuses_chunk_sizes_like_cpp_comm_naming_the_entry(chunk_sizes, error, message):
    x = torch.randn(5, 2, device=vdev(0))
    with virtual.stock_comm(), pytest.raises(error, match=message):
        comm.scatter(x, [0, 1], chunk_sizes=chunk_sizes)


def test_scatter_from_cpu_copies_every_chunk():
    x = torch.randn(6, 2)
    with virtual.stock_comm():
        chunks = comm.scatter(x, [3, 0], dim=0)
    assert [c.device for c in chunks] == [vdev(3), vdev(0)]
    assert torch.equal(torch.cat([c.cpu() for c in chunks]), x)


@settings(max_examples=25, deadline=None)
@given(batch=st.integers(1, 17), n=st.integers(1, 4), dim=st.integers(0, 1),
       source=st.sampled_from([-1, 0, 2]))
def test_scatter_then_gather_is_the_identity_with_torch_chunk_sizes(batch, n, dim, source):
    shape = (batch, 3) if dim == 0 else (2, batch)
    x = torch.randn(shape)
    x = x if source == -1 else x.to(vdev(source))
    with virtual.stock_comm():
        chunks = comm.scatter(x, list(range(n)), dim=dim)
        back = comm.gather(chunks, dim=dim, destination=3)
    assert [c.size(dim) for c in chunks] == [c.size(dim) for c in x.cpu().chunk(n, dim)]
    assert [c.device for c in chunks] == [vdev(i) for i in range(len(chunks))]
    assert back.device == vdev(3) and torch.equal(back.cpu(), x.cpu())


@pytest.mark.parametrize("destination, expected", [(2, "vdev:2"), (None, "vdev:0"), ("cpu", "cpu")])
def test_gather_allocates_on_the_destination(destination, expected):
    parts = [torch.randn(2, 3, device=vdev(i)) for i in range(3)]
    with virtual.stock_comm():
        out = comm.gather(parts, dim=1, destination=destination)
    assert out.device == torch.device(expected)
    assert torch.equal(out.cpu(), torch.cat([p.cpu() for p in parts], 1))
    assert not any(virtual.shares_memory(out, p) for p in parts)


def test_reduce_add_sums_onto_the_destination_without_nccl_warnings():
    parts = [torch.randn(4, device=vdev(i)) for i in range(3)]
    with virtual.stock_comm(), warnings.catch_warnings():
        warnings.simplefilter("error")
        total = comm.reduce_add(parts, destination=2)
    assert total.device == vdev(2)
    torch.testing.assert_close(total.cpu(), sum(p.cpu() for p in parts))


@pytest.mark.parametrize("n_devices, batch", [(1, 3), (3, 8), (4, 9)])
def test_stock_data_parallel_runs_and_matches_cpu(n_devices, batch):
    torch.manual_seed(n_devices + batch)
    cpu_model = nn.Sequential(nn.Linear(5, 6), nn.BatchNorm1d(6), nn.Tanh(), nn.Linear(6, 3))
    dp = nn.DataParallel(on_device(cpu_model, vdev(0)), device_ids=list(range(n_devices)))
    x = torch.randn(batch, 5)
    with virtual.stock_comm():
        out = dp(x)
        out.square().sum().backward()
    ref_out = torch.cat([cpu_model(x[rows]) for rows in torch_chunks(batch, n_devices)])
    assert_close_to_cpu(ref_out, out, vdev(0), rtol=1e-5, atol=1e-6)
    ref_out.square().sum().backward()
    for p, v_p in zip(cpu_model.parameters(), dp.module.parameters()):
        assert_close_to_cpu(p.grad, v_p.grad, vdev(0), rtol=1e-4, atol=1e-5)
