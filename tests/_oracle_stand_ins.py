"""CPU stand-ins for the CUDA-only pieces stock torch.nn.parallel calls (used by torch_oracle).

Every device index is the CPU; each stand-in copies exactly where the C++ comm op would copy
between two tensors on one device. See docs/oracle.md.
"""
from __future__ import annotations

import contextlib
import threading
import types
from collections.abc import Callable
from typing import Any

import torch
from torch._utils import (
    _flatten_dense_tensors,
    _reorder_tensors_as,
    _take_tensors,
    _unflatten_dense_tensors,
)

# --- stand-ins for the CUDA-only torch._C comm primitives -----------------------------------

def _check_indices(devices: list[int], n_devices: int) -> None:
    for d in devices:
        if not isinstance(d, int) or not -1 <= d < n_devices:
            raise RuntimeError(f"torch_oracle: invalid device ordinal {d!r} (have {n_devices})")


def _coalesced_copy(tensors: list[torch.Tensor], buffer_size: int) -> list[torch.Tensor]:
    # Like C++ broadcast_coalesced for devices[1:]: one flat buffer per bucket, unflattened,
    # each with a fresh version counter and requires_grad=False (make_variable(.., false)).
    with torch.no_grad():
        copies = []
        for bucket in _take_tensors(tensors, buffer_size):
            flat = _flatten_dense_tensors(bucket).clone()  # one tensor flattens to a view
            copies.extend(t.data for t in _unflatten_dense_tensors(flat, bucket))
    return list(_reorder_tensors_as(copies, tensors))


def make_comm_stand_ins(n_devices: int) -> dict[str, Callable[..., Any]]:
    def broadcast_coalesced(tensors, devices, buffer_size):
        _check_indices(devices, n_devices)
        if any(t.device.type != "cpu" for t in tensors):
            raise RuntimeError(f"All tensors must be on devices[0]: {devices[0]}")
        return [list(tensors)] + [_coalesced_copy(list(tensors), buffer_size) for _ in devices[1:]]

    def broadcast(tensor, devices):
        # C++ returns the input itself wherever the target is the tensor's own device.
        _check_indices(devices, n_devices)
        return [tensor for _ in devices]

    def scatter(tensor, devices, chunk_sizes, dim, streams):
        _check_indices(devices, n_devices)
        if chunk_sizes is None:
            return tensor.chunk(len(devices), dim)
        if len(chunk_sizes) != len(devices):
            raise RuntimeError(
                f"Expected devices and chunk_sizes to be of same length, but got "
                f"len(devices) = {len(devices)} and len(chunk_sizes) = {len(chunk_sizes)}"
            )
        return tensor.split(list(chunk_sizes), dim)  # chunks already on target: views

    def gather(tensors, dim, destination):
        if destination is not None:  # None: the current device, which is the CPU too
            _check_indices([destination], n_devices)
        # C++ always allocates the result, with replica 0's dtype, and copies every piece into it.
        return torch.cat(list(tensors), dim).to(tensors[0].dtype)

    return {"_broadcast_coalesced": broadcast_coalesced, "_broadcast": broadcast,
            "_scatter": scatter, "_gather": gather}


def reduce_add(inputs, destination=None):
    """comm.reduce_add without its 'inputs must be on GPUs' assert: root (replica 0) + others."""
    size = inputs[0].size()
    for i, t in enumerate(inputs):
        if t.size() != size:
            raise ValueError(f"input {i} has invalid size: got {'x'.join(map(str, t.size()))}, "
                             f"but expected {'x'.join(map(str, size))}")
    if len(inputs) == 1:
        return inputs[0]
    result = inputs[0] + inputs[1]
    for other in inputs[2:]:
        result.add_(other)
    return result


# --- accelerator / device-index stand-ins, visible only to the stock modules ----------------

class TorchView:
    """``torch`` as one stock module sees it: a few attributes replaced, the rest delegated."""

    def __init__(self, **overrides: Any) -> None:
        self.__dict__.update(overrides)

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)


class _NullStream(contextlib.nullcontext):
    """CPU has no streams; parallel_apply only enters them."""


def make_fake_accelerator(n_devices: int) -> types.SimpleNamespace:
    current = threading.local()  # per worker thread, like the CUDA current device

    def current_device_index() -> int:
        return getattr(current, "index", 0)

    @contextlib.contextmanager
    def device_index(index):
        _check_indices([index], n_devices)
        previous, current.index = current_device_index(), index
        try:
            yield
        finally:
            current.index = previous

    def get_device_index(device, optional=False, allow_cpu=False):
        # torch.cuda._utils._get_device_index on a machine with an accelerator:
        # None means the current device (spec B), ints pass, anything else is checked by stock.
        if device is None and optional:
            return current_device_index()
        return torch.cuda._utils._get_device_index(device, optional, allow_cpu)

    return types.SimpleNamespace(
        is_available=lambda: True,
        current_accelerator=lambda: torch.device("cpu"),
        current_stream=lambda device=None: _NullStream(),
        device_index=device_index,
        current_device_index=current_device_index,
        get_device_index=get_device_index,
    )


def accelerator_autocast_enabled(device_type: str | None = None) -> bool:
    # No argument means the accelerator's flag (CUDA's on a GPU machine); here that is the CPU.
    return torch.is_autocast_enabled("cpu" if device_type is None else device_type)


def cpu_device(type: Any, index: Any = None) -> torch.device:
    """torch.device for data_parallel.py: ('cpu', i) is plain 'cpu', so its device check holds."""
    if type == "cpu":
        return torch.device("cpu")
    return torch.device(type, index) if index is not None else torch.device(type)
