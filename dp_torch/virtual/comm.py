"""Stand-ins for the CUDA-only comm primitives, so stock `torch.nn.parallel` runs on vdev.

`torch.nn.parallel.comm` calls `torch._C._broadcast_coalesced`, `_broadcast`, `_scatter`,
`_gather` (and their `_out` forms); CPU builds of torch lack them. These versions follow the C++
ones in torch/csrc/cuda/comm.cpp: broadcast returns the source tensors themselves on their own
device and copies elsewhere; coalesced copies are views of one flat buffer per device, each with
its own version counter; scatter leaves chunks on the source device as views; gather allocates.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch._utils import (
    _flatten_dense_tensors,
    _reorder_tensors_as,
    _take_tensors,
    _unflatten_dense_tensors,
)

from dp_torch._errors import UsageTypeError
from dp_torch.virtual import tensor as _vt


def _device(index: int) -> torch.device:
    return torch.device("cpu") if index == -1 else _vt.device_of(index)


def _copy_to(tensor: torch.Tensor, index: int) -> torch.Tensor:
    out = torch.empty(tensor.shape, dtype=tensor.dtype, device=_device(index))
    return out.copy_(tensor)


def broadcast(tensor: torch.Tensor, devices: list[int]) -> list[torch.Tensor]:
    return [tensor if d == tensor.get_device() else _copy_to(tensor, d) for d in devices]


def broadcast_out(tensor: torch.Tensor, out: list[torch.Tensor]) -> list[torch.Tensor]:
    for o in out:
        o.copy_(tensor)
    return out


def _fresh(t: torch.Tensor) -> torch.Tensor:
    """A new tensor sharing `t`'s memory, with no history and its own version counter
    (C++ uses `tensor_data()`, so an in-place op on one copy never invalidates another)."""
    if isinstance(t, _vt.VTensor):
        return _vt.wrap(t._data, t.device.index)
    return t.detach()


def broadcast_coalesced(tensors, devices: list[int], buffer_size: int):
    for i, t in enumerate(tensors):
        if t.get_device() != devices[0]:
            raise RuntimeError(
                f"broadcast_coalesced: tensor {i} is on {t.device}; all tensors must be on "
                f"devices[0] = {_device(devices[0])}"
            )
    outputs = [list(tensors)] + [[] for _ in devices[1:]]
    chunks = list(_take_tensors(tensors, buffer_size))
    for chunk in chunks:
        flat_copies = broadcast(_flatten_dense_tensors(chunk), devices)
        for device_outputs, flat in zip(outputs[1:], flat_copies[1:]):
            device_outputs.extend(_fresh(t) for t in _unflatten_dense_tensors(flat, chunk))
    if len({(t.dtype, t.layout) for t in tensors}) > 1:  # chunks were grouped by type
        outputs = [outputs[0]] + [_reorder_tensors_as(o, tensors) for o in outputs[1:]]
    return outputs


def scatter(tensor, devices: list[int], chunk_sizes=None, dim: int = 0, streams=None):
    if not devices:
        raise RuntimeError("Expected at least one device to scatter to")
    if chunk_sizes is not None and len(chunk_sizes) != len(devices):
        raise RuntimeError(
            f"Expected devices and chunk_sizes to be of same length, but got "
            f"len(devices) = {len(devices)} and len(chunk_sizes) = {len(chunk_sizes)}"
        )
    chunks = (tensor.split(_checked_chunk_sizes(chunk_sizes, tensor.size(dim)), dim)
              if chunk_sizes is not None else tensor.chunk(len(devices), dim))
    source = tensor.get_device()
    return [c if d == source else c.to(_device(d)) for c, d in zip(chunks, devices)]


def _checked_chunk_sizes(chunk_sizes, size: int) -> list[int]:
    """comm.cpp's checks (sum first, then each size > 0), naming the offending entry."""
    for i, n in enumerate(chunk_sizes):
        if not isinstance(n, int) or isinstance(n, bool):
            raise UsageTypeError(f"scatter: chunk_sizes[{i}]={n!r} is not an int; pass one int row count per device")
    total = sum(chunk_sizes)
    if total != size:
        raise RuntimeError(
            f"given chunk sizes don't sum up to the tensor's size (sum(chunk_sizes) == {total}, but expected "
            f"{size}); pass sizes that add up to {size}"
        )
    for i, n in enumerate(chunk_sizes):
        if n <= 0:
            raise RuntimeError(
                f"Chunk size must be positive: chunk_sizes[{i}]={n}; give every device at least one row, "
                "or scatter to fewer devices"
            )
    return list(chunk_sizes)


def scatter_out(tensor, out, dim: int = 0, streams=None):
    chunks = tensor.split([o.size(dim) for o in out], dim)
    for o, c in zip(out, chunks):
        o.copy_(c)
    return out


def gather(tensors, dim: int, destination=None) -> torch.Tensor:
    if not tensors:
        raise RuntimeError("Expected at least one tensor to gather from")
    for i, t in enumerate(tensors):
        if t.device.type == "cpu":
            raise RuntimeError(
                "Expected all input tensors to be CUDA tensors, but tensor at index "
                f"{i} was on device {t.device}"
            )
    shape = list(tensors[0].shape)
    dim = dim % max(len(shape), 1)
    shape[dim] = sum(t.size(dim) for t in tensors)
    index = 0 if destination is None else destination  # None: the current device, vdev:0
    out = torch.empty(shape, dtype=tensors[0].dtype, device=_device(index))
    return gather_out(tensors, out, dim)


def gather_out(tensors, out, dim: int = 0) -> torch.Tensor:
    for piece, t in zip(out.split([t.size(dim) for t in tensors], dim), tensors):
        piece.copy_(t)
    return out


_STAND_INS = {
    "_broadcast": broadcast, "_broadcast_out": broadcast_out,
    "_broadcast_coalesced": broadcast_coalesced,
    "_scatter": scatter, "_scatter_out": scatter_out,
    "_gather": gather, "_gather_out": gather_out,
}
_MISSING = object()


@contextlib.contextmanager
def stock_comm() -> Iterator[None]:
    """Within the block, stock `torch.nn.parallel` (DataParallel, replicate, scatter, gather,
    parallel_apply) runs on virtual devices: CPU stand-ins fill in torch's CUDA-only comm
    functions, and reduce_add takes its non-NCCL path. Process-global while active; nests."""
    import torch.cuda.nccl as nccl

    patches = [(torch._C, name, fn) for name, fn in _STAND_INS.items()]
    patches.append((nccl, "is_available", lambda tensors: False))
    saved = [(owner, name, getattr(owner, name, _MISSING)) for owner, name, _ in patches]
    for owner, name, fn in patches:
        setattr(owner, name, fn)
    try:
        yield
    finally:
        for owner, name, old in reversed(saved):
            if old is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, old)
