"""Registers the virtual-device backend with PyTorch (process-global, done once by install)."""
from __future__ import annotations

import torch

from dp_torch.virtual import tensor as _vt
from dp_torch.virtual.moves import check_backward

_REQUIRED_APIS = (
    "torch.utils.backend_registration._setup_privateuseone_for_python_backend",
    "torch._C._acc.register_python_privateuseone_device_guard",
    "torch._C._set_multithreading_enabled",
    "torch.Tensor._make_wrapper_subclass",
    "torch.library.fallthrough_kernel",
)


def missing_torch_apis() -> list[str]:
    """The experimental torch APIs the backend needs that this torch lacks."""
    missing = []
    for path in _REQUIRED_APIS:
        obj = torch
        for attr in path.split(".")[1:]:
            obj = getattr(obj, attr, None)
            if obj is None:
                missing.append(path)
                break
    return missing


class _BackendModule:
    """`torch.<name>`: the device-module API PyTorch asks a backend for."""

    def __init__(self, n: int):
        self._n = n

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return True

    def device_count(self) -> int:
        return self._n

    def current_device(self) -> int:
        # The Python device guard has no current device: an index-less `vdev` means vdev:0.
        return 0

    def set_device(self, index) -> None:
        pass

    def synchronize(self, device=None) -> None:
        pass  # CPU kernels are synchronous

    def manual_seed_all(self, seed: int) -> None:
        pass  # random ops use the CPU generator, seeded by torch.manual_seed

    def _is_in_bad_fork(self) -> bool:
        return False

    def get_amp_supported_dtype(self) -> list[torch.dtype]:
        return [torch.float16, torch.bfloat16]


class _OneThreadBackwardEngine:
    """Proxy for the autograd engine that runs every backward on its calling thread.

    The Python device guard reports one device, so the engine's per-device worker queues
    cannot serve vdev:1+; single-threaded backward (thread-local, hence set per call) avoids
    them, from any thread. CPU-only backward is unaffected: it always runs on the caller.
    """

    def __init__(self, engine):
        self._engine = engine

    def run_backward(self, roots, *args, **kwargs):
        # A graph built before a module moved fails inside a vdev node (an abort): raise it here.
        check_backward(roots, kwargs.get("accumulate_grad", True))
        with torch.autograd.set_multithreading_enabled(False):
            return self._engine.run_backward(roots, *args, **kwargs)

    def __getattr__(self, attr):
        return getattr(self._engine, attr)


def _moving_held_tensors_by_data(swap_tensors):
    """`torch.utils.swap_tensors`, moving a vdev tensor that an autograd graph holds by `.data`.

    Module._apply swaps every traceable tensor subclass, VTensor included. swap_tensors refuses
    a tensor a graph saved, and poisons the AccumulateGrad node of one a graph reaches; on vdev
    that poison's raise would abort the process (a Python error inside a vdev backward node meets
    PyTorch's Python device guard, std::terminate). CUDA moves such a parameter by
    `param.data = ...`: it keeps its identity and the old graph fails only where CUDA's kernels
    meet two devices, which moves.py raises before the backward starts. This does the same.
    """

    def swap(t1, t2):
        if isinstance(t1, _vt.VTensor) and t1._use_count() > 1:  # a C++ owner: only a graph
            if not isinstance(t2, _vt.VTensor):
                raise RuntimeError(
                    f"swap_tensors: a {t1.device} parameter of shape {tuple(t1.shape)} is still held by an "
                    f"autograd graph, so it cannot be swapped for a {t2.device} tensor (module.to() under "
                    "torch.__future__.set_swap_module_params_on_conversion(True)). Drop the graph first "
                    "(backward(), then del the loss or output that holds it), or move a copy "
                    "(copy.deepcopy(module).to(...))"
                )
            t1.data = t2
            return None
        return swap_tensors(t1, t2)

    swap.__wrapped__ = swap_tensors
    return swap


def _empty(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    data = torch.empty(size, dtype=dtype, layout=layout, memory_format=memory_format)
    return _vt.wrap(data, _index_of(device))


def _empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    data = torch.empty_strided(size, stride, dtype=dtype, layout=layout)
    return _vt.wrap(data, _index_of(device))


def _copy_from(src, dst, non_blocking=False):
    return _vt.run_on_cpu(torch.ops.aten._copy_from.default, (src, dst, non_blocking), {})


def _copy_from_and_resize(src, dst):
    return _vt.run_on_cpu(torch.ops.aten._copy_from_and_resize.default, (src, dst), {})


def _index_of(device) -> int:
    return 0 if device is None or device.index is None else _vt.check_index(device.index)


def _refuse_pin_memory(tensor, device=None):
    raise RuntimeError(
        "pin_memory(): dp_torch.virtual is installed, so PyTorch asks the current accelerator "
        f"({torch._C._get_privateuse1_backend_name()}) for pinned memory, which virtual devices do not have. "
        "Pinning only speeds up copies to a GPU: leave it out in this process "
        "(DataLoader(..., pin_memory=False)), or run without virtual devices"
    )


def register_backend(n: int, name: str) -> list:
    """Renames PrivateUse1 to `name`, registers factories and autograd; returns the libraries."""
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    _setup_privateuseone_for_python_backend(name, backend_module=_BackendModule(n))
    # Factories never see a VTensor argument, so they need real kernels on the dispatch key.
    # Per-op kernels, not a boxed fallback: the fallback trips an internal assert under modes.
    aten_lib = torch.library.Library("aten", "IMPL")
    aten_lib.impl("empty.memory_format", _empty, "PrivateUse1")
    aten_lib.impl("empty_strided", _empty_strided, "PrivateUse1")
    aten_lib.impl("_copy_from", _copy_from, "PrivateUse1")
    aten_lib.impl("_copy_from_and_resize", _copy_from_and_resize, "PrivateUse1")
    # Pinning asks the accelerator (now vdev) for a host allocator it cannot give: say so.
    aten_lib.impl("_pin_memory", _refuse_pin_memory, "CPU")
    # Autocast on vdev is a no-op (no casting rules) rather than a crash.
    autocast_lib = torch.library.Library("_", "IMPL")
    autocast_lib.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
    # Checkpoints of vdev tensors load with torch.load's default weights_only=True.
    torch.serialization.add_safe_globals([_vt.VTensor, _vt._rebuild])
    # Module._apply looks swap_tensors up at each call, so moves of vdev modules get this one.
    torch.utils.swap_tensors = _moving_held_tensors_by_data(torch.utils.swap_tensors)
    torch.autograd.Variable._execution_engine = _OneThreadBackwardEngine(
        torch.autograd.Variable._execution_engine
    )
    return [aten_lib, autocast_lib]
