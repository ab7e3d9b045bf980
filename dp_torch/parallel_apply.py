"""parallel_apply: run replica i on inputs[i], one thread per replica, with the caller's thread state."""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

import torch
from torch import nn
from torch._utils import ExceptionWrapper

from dp_torch._devices import DeviceLike, current_stream, device_context, resolve_device
from dp_torch._errors import UsageError

__all__ = ["parallel_apply", "LengthMismatchError"]


class LengthMismatchError(AssertionError, UsageError):
    """parallel_apply got sequences of different lengths (an AssertionError, as in PyTorch)."""


@dataclass(frozen=True)
class _ThreadState:
    """What a worker thread inherits from the caller: grad/inference mode, autocast for its device type."""

    grad_enabled: bool
    inference_mode: bool
    autocast_dtype: torch.dtype | None  # None: autocast off for this device type
    autocast_cache: bool

    @classmethod
    def capture(cls, device_type: str) -> _ThreadState:
        dtype = torch.get_autocast_dtype(device_type) if _autocast_enabled(device_type) else None
        return cls(
            torch.is_grad_enabled(), torch.is_inference_mode_enabled(), dtype, torch.is_autocast_cache_enabled()
        )

    def restore(self, device_type: str) -> contextlib.ExitStack:
        stack = contextlib.ExitStack()
        stack.enter_context(torch.set_grad_enabled(self.grad_enabled))
        if self.inference_mode:  # thread-local and off in a new thread, like autocast
            stack.enter_context(torch.inference_mode())
        if self.autocast_dtype is not None:  # autocast is thread-local and off in a new thread
            stack.enter_context(
                torch.autocast(device_type, dtype=self.autocast_dtype, cache_enabled=self.autocast_cache)
            )
        return stack


def _autocast_enabled(device_type: str) -> bool:
    try:
        return torch.is_autocast_enabled(device_type)
    except RuntimeError:  # device types without autocast support, e.g. "meta"
        return False


def parallel_apply(
    modules: Sequence[nn.Module],
    inputs: Sequence[Any],
    kwargs_tup: Sequence[dict[str, Any]] | None = None,
    devices: Sequence[DeviceLike | None] | None = None,
) -> list[Any]:
    """Call ``modules[i](*inputs[i], **kwargs_tup[i])`` on devices[i], in parallel threads.

    Each thread gets the caller's grad mode, inference mode and autocast state (enabled, dtype,
    cache) for its device type, and devices[i] as its current device. A list/tuple input is
    unpacked, anything else is one argument. ``devices=None`` (or a None entry) uses the device of
    the replica's first parameter/buffer, else of its first input tensor. Re-raises the failure of
    the lowest-index replica with its original type: an Exception rebuilt with "Caught <type> in
    replica i on device d" (PyTorch's ExceptionWrapper), a KeyboardInterrupt or SystemExit as
    itself with that note added. Returns the outputs in replica order.
    """
    _check_lengths(modules, inputs, kwargs_tup, devices)
    if kwargs_tup is None:
        kwargs_tup = ({},) * len(modules)
    if devices is None:
        devices = [None] * len(modules)
    devices = [_replica_device(i, m, x, d) for i, (m, x, d) in enumerate(zip(modules, inputs, devices))]
    streams = [current_stream(d) for d in devices]
    states = [_ThreadState.capture(d.type) for d in devices]
    results: list[Any] = [None] * len(modules)

    def worker(i: int) -> None:
        where = f"in replica {i} on device {devices[i]}"
        try:
            with states[i].restore(devices[i].type), device_context(devices[i]), _stream_context(streams[i]):
                args = inputs[i] if isinstance(inputs[i], (list, tuple)) else (inputs[i],)
                results[i] = modules[i](*args, **kwargs_tup[i])
        except Exception:
            results[i] = ExceptionWrapper(where=where)
        except BaseException as error:  # re-raised in the caller's thread below
            error.add_note(f"Raised {where} (dp_torch.parallel_apply).")
            results[i] = _Interrupted(error)

    if len(modules) > 1:
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(modules))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    else:
        worker(0)

    for output in results:
        if isinstance(output, ExceptionWrapper):
            output.reraise()
        if isinstance(output, _Interrupted):
            raise output.error
    return results


@dataclass(frozen=True)
class _Interrupted:
    """A replica's BaseException that is not an Exception (KeyboardInterrupt, SystemExit).

    Re-raised as the very object, with a note naming replica and device: rebuilding it from a
    message, as ExceptionWrapper does, would change what it means (SystemExit's exit code).
    """

    error: BaseException


def _check_lengths(
    modules: Sequence[nn.Module], inputs: Sequence[Any], kwargs_tup: Sequence | None, devices: Sequence | None
) -> None:
    if len(modules) == 0:
        raise UsageError("parallel_apply: modules is empty; pass one replica per device (see replicate)")
    named = [("inputs", inputs), ("kwargs_tup", kwargs_tup), ("devices", devices)]
    for name, seq in named:
        if seq is not None and len(seq) != len(modules):
            raise LengthMismatchError(
                f"The number of modules {len(modules)} is not equal to the number of {name} {len(seq)}; "
                f"parallel_apply needs one entry of {name} per module"
            )


def _replica_device(i: int, module: nn.Module, replica_input: Any, device: DeviceLike | None) -> torch.device:
    if device is not None:
        return resolve_device(device, f"parallel_apply: devices[{i}]")
    tensor = _first_tensor_of_module(module)
    if tensor is None:
        tensor = _first_tensor(replica_input)
    if tensor is None:
        raise UsageError(
            f"parallel_apply: devices[{i}] is None and replica {i} has no parameters, buffers or tensor "
            "inputs to take a device from; pass devices=[...] explicitly"
        )
    return tensor.device


def _first_tensor_of_module(module: nn.Module) -> torch.Tensor | None:
    # Replicas keep their parameters in _former_parameters, not in parameters().
    replica_params = (p for m in module.modules() for p in getattr(m, "_former_parameters", {}).values())
    return next(chain(module.parameters(), replica_params, module.buffers()), None)


def _first_tensor(obj: Any) -> torch.Tensor | None:
    """First tensor depth-first through lists, tuples and dict values (PyTorch's get_a_var order)."""
    if isinstance(obj, torch.Tensor):
        return obj
    children = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else ()
    return next((t for t in map(_first_tensor, children) if t is not None), None)


def _stream_context(stream: torch.Stream | None) -> contextlib.AbstractContextManager:
    return contextlib.nullcontext() if stream is None else stream
