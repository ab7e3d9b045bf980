"""DataParallel (nn.Module) and data_parallel (function): scatter -> replicate -> parallel_apply -> gather."""
from __future__ import annotations

import warnings
from collections.abc import Sequence
from itertools import chain
from typing import Any, Generic, TypeVar

import torch
from torch import nn

from dp_torch._batch import check_dim
from dp_torch._devices import DeviceLike, default_device_ids, resolve_device, resolve_devices
from dp_torch._errors import UsageError, UsageTypeError
from dp_torch.parallel_apply import parallel_apply
from dp_torch.replicate import replicate
from dp_torch.scatter_gather import gather, scatter_kwargs

__all__ = ["DataParallel", "data_parallel"]

ModuleT = TypeVar("ModuleT", bound=nn.Module)

_IMBALANCE_WARNING = """
    There is an imbalance between your GPUs. You may want to exclude GPU {} which
    has less than 75% of the memory or cores of GPU {}. You can do so by setting
    the device_ids argument to DataParallel, or by setting the CUDA_VISIBLE_DEVICES
    environment variable."""


class DataParallel(nn.Module, Generic[ModuleT]):
    """Split each batch across ``device_ids``, run one replica per chunk, gather on ``output_device``.

    Like torch.nn.DataParallel, but for any devices: CUDA, a PrivateUse1 backend, or ``"cpu"``
    repeated (N replicas on one CPU). Every forward copies the parameters to device_ids[1:] and
    syncs on gather. ``module`` must live on device_ids[0]; gradients sum back onto it, and in-place
    buffer updates (BatchNorm running stats) are kept from replica 0 only.

    Args:
        module: the module to parallelise; stored as ``self.module``.
        device_ids: devices to use (default: every accelerator device, or ``["cpu"]`` without one).
        output_device: where outputs are gathered (default: device_ids[0]).
        dim: the batch dimension inputs are split and outputs joined along.
    """

    def __init__(
        self,
        module: ModuleT,
        device_ids: Sequence[DeviceLike] | None = None,
        output_device: DeviceLike | None = None,
        dim: int = 0,
    ) -> None:
        super().__init__()
        torch._C._log_api_usage_once("dp_torch.DataParallel")
        _check_module(module, "DataParallel")
        self.module = module
        self.device_ids = _resolve_device_ids(device_ids, "DataParallel")
        self.output_device = (
            self.device_ids[0] if output_device is None else resolve_device(output_device, "output_device")
        )
        self.dim = check_dim(dim, "DataParallel")
        self.src_device_obj = self.device_ids[0]
        _warn_if_unbalanced(self.device_ids)
        if len(self.device_ids) == 1:
            self.module.to(self.src_device_obj)

    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        with torch.autograd.profiler.record_function("DataParallel.forward"):
            _check_module_device(self.module, self.src_device_obj)
            inputs, module_kwargs = self.scatter(inputs, kwargs, self.device_ids)
            if not inputs and not module_kwargs:
                inputs, module_kwargs = ((),), ({},)
            if len(self.device_ids) == 1:
                return self.module(*inputs[0], **module_kwargs[0])
            replicas = self.replicate(self.module, self.device_ids[: len(inputs)])
            outputs = self.parallel_apply(replicas, inputs, module_kwargs)
            return self.gather(outputs, self.output_device)

    def replicate(self, module: ModuleT, device_ids: Sequence[DeviceLike]) -> list[ModuleT]:
        """Replicas for this forward; detached (no autograd graph) when grad is disabled."""
        return replicate(module, device_ids, not torch.is_grad_enabled())

    def scatter(
        self, inputs: tuple[Any, ...], kwargs: dict[str, Any] | None, device_ids: Sequence[DeviceLike]
    ) -> tuple[tuple[Any, ...], tuple[dict[str, Any], ...]]:
        return scatter_kwargs(inputs, kwargs, device_ids, dim=self.dim)

    def parallel_apply(self, replicas: Sequence[ModuleT], inputs: Sequence[Any], kwargs: Any) -> list[Any]:
        return parallel_apply(replicas, inputs, kwargs, self.device_ids[: len(replicas)])

    def gather(self, outputs: Any, output_device: DeviceLike) -> Any:
        return gather(outputs, output_device, dim=self.dim)


def data_parallel(
    module: nn.Module,
    inputs: Any,
    device_ids: Sequence[DeviceLike] | None = None,
    output_device: DeviceLike | None = None,
    dim: int = 0,
    module_kwargs: dict[str, Any] | None = None,
) -> Any:
    """Evaluate ``module(*inputs, **module_kwargs)`` data-parallel over ``device_ids`` (functional DataParallel).

    Unlike the class it always replicates with autograd (even under no_grad), as PyTorch does,
    and never moves ``module``. A non-tuple ``inputs`` is one positional argument.
    """
    _check_module(module, "data_parallel")
    dim = check_dim(dim, "data_parallel")
    if not isinstance(inputs, tuple):
        inputs = () if inputs is None else (inputs,)
    device_ids = _resolve_device_ids(device_ids, "data_parallel")
    output_device = device_ids[0] if output_device is None else resolve_device(output_device, "output_device")
    _check_module_device(module, device_ids[0])
    inputs, module_kwargs = scatter_kwargs(inputs, module_kwargs, device_ids, dim)
    if not inputs and not module_kwargs:
        inputs, module_kwargs = ((),), ({},)
    if len(device_ids) == 1:
        return module(*inputs[0], **module_kwargs[0])
    used_device_ids = device_ids[: len(inputs)]
    replicas = replicate(module, used_device_ids)
    outputs = parallel_apply(replicas, inputs, module_kwargs, used_device_ids)
    return gather(outputs, output_device, dim)


def _resolve_device_ids(device_ids: Sequence[DeviceLike] | None, who: str) -> list[torch.device]:
    if device_ids is None:
        return default_device_ids()
    devices = resolve_devices(device_ids, "device_ids")
    if not devices:
        raise UsageError(f"{who}: device_ids is empty; pass at least one device, e.g. ['cuda:0'] or ['cpu']")
    return devices


def _check_module(module: Any, who: str) -> None:
    if not isinstance(module, nn.Module):
        raise UsageTypeError(
            f"{who}: module must be a torch.nn.Module, got {type(module).__name__} ({module!r:.60}); "
            "wrap a function in an nn.Module whose forward calls it"
        )


def _check_module_device(module: nn.Module, src_device: torch.device) -> None:
    for t in chain(module.parameters(), module.buffers()):
        if t.device != src_device:
            raise RuntimeError(
                "module must have its parameters and buffers "
                f"on device {src_device} (device_ids[0]) but found one of "
                f"them on device: {t.device}"
            )


def _warn_if_unbalanced(device_ids: list[torch.device]) -> None:
    """PyTorch's CUDA-only check: warn when a GPU has < 75% of the memory (else cores) of another."""
    if not all(d.type == "cuda" for d in device_ids):
        return
    props = [torch.cuda.get_device_properties(d) for d in device_ids]
    for measure in ("total_memory", "multi_processor_count"):
        values = [getattr(p, measure) for p in props]
        smallest, largest = values.index(min(values)), values.index(max(values))
        if values[smallest] / values[largest] < 0.75:
            warnings.warn(
                _IMBALANCE_WARNING.format(device_ids[smallest].index, device_ids[largest].index), stacklevel=3
            )
            return
