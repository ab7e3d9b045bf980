"""Device names -> torch.device, existence checks and per-thread device context.

Device-generic: CUDA, a PrivateUse1 backend (e.g. ``vdev``) and ``cpu`` go through the same
code. Ints name an index of the current accelerator; -1 and ``"cpu:i"`` mean the CPU.
"""
from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import torch

from dp_torch._errors import UsageError, UsageTypeError

DeviceLike = int | str | torch.device

_CPU = torch.device("cpu")
_INDEXLESS_TYPES = ("cpu", "meta")


def accelerator_type() -> str | None:
    """The type of the current accelerator (``"cuda"``, ``"vdev"``...), or None on a CPU-only machine."""
    if not torch.accelerator.is_available():
        return None
    return torch.accelerator.current_accelerator().type


def device_count(device_type: str) -> int:
    """How many devices of ``device_type`` exist (0 when the type is not available)."""
    if device_type == accelerator_type():
        return torch.accelerator.device_count()
    try:
        return torch.get_device_module(device_type).device_count()
    except (AttributeError, RuntimeError):
        return 0


def default_device_ids() -> list[torch.device]:
    """Every accelerator device, or ``[cpu]`` on a machine without one."""
    device_type = accelerator_type()
    if device_type is None:
        return [_CPU]
    return [torch.device(device_type, i) for i in range(torch.accelerator.device_count())]


def resolve_device(value: DeviceLike, arg_name: str) -> torch.device:
    """Normalise one device argument; ``arg_name`` names it in errors (e.g. ``"device_ids[2]"``).

    Raises ValueError for a device that does not exist on this machine, and for ``meta``.
    """
    if isinstance(value, torch.device) and value.type == "cpu" and value.index is None:
        return value  # already normalised (the common case)
    device = _parse(value, arg_name)
    if device.type == "meta":
        # Checked here, not at the first copy: there it is "Cannot copy out of meta tensor".
        raise ValueError(
            f"{arg_name}={value!r} is the meta device, but meta tensors have no data, so no replica can be "
            "copied to it, run on it or gathered to it; pass 'cpu' or a real device (to check shapes without "
            "data, run the module itself on meta)"
        )
    if device.type in _INDEXLESS_TYPES:
        return torch.device(device.type)  # their tensors never carry an index: "cpu:1" tensors report "cpu"
    if device.index is None:
        device = torch.device(device.type, _current_index(device.type))
    count = device_count(device.type)
    if count == 0:
        raise UsageError(
            f"{arg_name}={value!r} names {device}, but this machine has no {device.type} device; pass 'cpu' "
            "(repeat it, e.g. ['cpu', 'cpu'], for several CPU replicas)"
        )
    if device.index >= count:
        existing = ", ".join(f"{device.type}:{i}" for i in range(count)) or "none"
        raise UsageError(
            f"{arg_name}={value!r} names {device}, which does not exist: this machine has {count} "
            f"{device.type} device(s) ({existing}); pass one of them or 'cpu'"
        )
    return device


def resolve_devices(values: Sequence[DeviceLike], arg_name: str) -> list[torch.device]:
    """Normalise a list of devices; empty lists are the caller's to reject."""
    if isinstance(values, (str, int, torch.device)):
        raise UsageTypeError(f"{arg_name} must be a list of devices, got {values!r}; wrap it: [{values!r}]")
    return [resolve_device(v, f"{arg_name}[{i}]") for i, v in enumerate(values)]


def _parse(value: Any, arg_name: str) -> torch.device:
    if isinstance(value, torch.device):
        return value
    if isinstance(value, str):
        try:
            return torch.device(value)
        except RuntimeError as err:
            raise UsageError(
                f"{arg_name}={value!r} is not a device name ({err}); use e.g. 'cpu' or 'cuda:0' (virtual devices "
                "such as 'vdev:0' exist once you call dp_torch.virtual.install() first)"
            ) from None
    if isinstance(value, int) and not isinstance(value, bool):
        if value == -1:
            return _CPU
        device_type = accelerator_type()
        if device_type is None:
            raise UsageError(
                f"{arg_name}={value!r} is an accelerator index, but this machine has no accelerator; "
                "pass 'cpu' (repeat it, e.g. ['cpu', 'cpu'], for several CPU replicas)"
            )
        if value < 0:
            last = torch.accelerator.device_count() - 1
            raise UsageError(f"{arg_name}={value!r} is negative; use an index in 0..{last}")
        return torch.device(device_type, value)
    raise UsageTypeError(
        f"{arg_name}={value!r} is not a device; pass an int, a str such as 'cuda:1', or a torch.device")


def _current_index(device_type: str) -> int:
    if device_type == accelerator_type():
        return torch.accelerator.current_device_index()
    try:
        return torch.get_device_module(device_type).current_device()
    except (AttributeError, RuntimeError, AssertionError):  # AssertionError: "Torch not compiled with CUDA"
        return 0  # not available; the existence check that follows reports it


def device_context(device: torch.device) -> contextlib.AbstractContextManager:
    """Make ``device`` the current device of this thread, where its type has that notion."""
    if device.type in _INDEXLESS_TYPES:
        return contextlib.nullcontext()
    if device.type == accelerator_type():
        return torch.accelerator.device_index(device.index)
    module = getattr(torch, device.type, None)
    if hasattr(module, "device"):
        return module.device(device.index)
    return contextlib.nullcontext()


def current_stream(device: torch.device) -> torch.Stream | None:
    """The caller's current stream on ``device`` (to reuse it in a worker thread), or None."""
    if device.type != accelerator_type():
        return None
    try:
        return torch.accelerator.current_stream(device.index)
    except (RuntimeError, NotImplementedError):
        return None  # backends without streams (e.g. a Python-only PrivateUse1 backend)
