"""scatter / scatter_kwargs / gather: split inputs across devices and join outputs back."""
from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import torch

from dp_torch._batch import (
    check_all_none,
    check_concatenable,
    check_dim,
    check_no_hidden_batch,
    check_same_container,
    check_splittable,
    is_namedtuple,
    tensor_leaves,
    with_article,
)
from dp_torch._devices import DeviceLike, accelerator_type, resolve_device, resolve_devices
from dp_torch._errors import UsageError, UsageTypeError
from dp_torch._functions import Gather, Scatter

__all__ = ["scatter", "scatter_kwargs", "gather"]

CPU_AS_MINUS_ONE_WARNING = (
    'Using -1 to represent CPU tensor is deprecated. Please use a device object or string instead, e.g., "cpu".'
)


def scatter(inputs: Any, target_devices: Sequence[DeviceLike], dim: int = 0) -> Any:
    """Split every tensor in ``inputs`` into torch.chunk pieces, piece i on target_devices[i].

    Containers are rebuilt per device (tuples become lists of tuples); other objects are shared by
    reference. Fewer pieces than devices may result (batch 5 on 4 devices: 2, 2, 1). A piece that
    is already on its device is a view, others are copies. A bare tensor gives a tuple, else a list.
    Objects that hold the batch where scatter cannot see it (a dataclass field) are refused.
    """
    dim = check_dim(dim, "scatter")
    devices = _target_devices(target_devices, "scatter")
    batch = check_splittable(list(tensor_leaves(inputs, "inputs")), dim, "scatter")
    check_no_hidden_batch(inputs, "inputs", batch, dim, len(devices), "scatter")
    return _scatter(inputs, devices, dim)


def scatter_kwargs(
    inputs: tuple[Any, ...], kwargs: dict[str, Any] | None, target_devices: Sequence[DeviceLike], dim: int = 0
) -> tuple[tuple[Any, ...], tuple[dict[str, Any], ...]]:
    """Scatter positional and keyword inputs, padding the shorter result like PyTorch.

    Returns ``(args_per_replica, kwargs_per_replica)``. As in PyTorch, non-tensor kwargs reach every
    device, so positional args are padded with ``()`` (those replicas get no positional args).
    """
    dim = check_dim(dim, "scatter_kwargs")
    devices = _target_devices(target_devices, "scatter_kwargs")
    leaves = [*tensor_leaves(inputs, "args"), *tensor_leaves(kwargs or {}, "kwargs")]
    batch = check_splittable(leaves, dim, "scatter_kwargs")
    check_no_hidden_batch(inputs, "args", batch, dim, len(devices), "scatter_kwargs")
    check_no_hidden_batch(kwargs or {}, "kwargs", batch, dim, len(devices), "scatter_kwargs")
    scattered_inputs = _scatter(inputs, devices, dim) if inputs else []
    scattered_kwargs = _scatter(kwargs, devices, dim) if kwargs else []
    if len(scattered_inputs) < len(scattered_kwargs):
        scattered_inputs.extend(() for _ in range(len(scattered_kwargs) - len(scattered_inputs)))
    elif len(scattered_kwargs) < len(inputs):  # PyTorch compares with len(inputs), not the scattered length
        scattered_kwargs.extend({} for _ in range(len(scattered_inputs) - len(scattered_kwargs)))
    if len(scattered_inputs) != len(scattered_kwargs):
        raise UsageError(
            f"scatter_kwargs: the tensors in kwargs split into {len(scattered_kwargs)} pieces but the "
            f"non-tensor positional args are copied to all {len(scattered_inputs)} devices, so some replicas "
            "would get no kwargs; pass a batch of at least len(target_devices) or fewer devices"
        )
    return tuple(scattered_inputs), tuple(scattered_kwargs)


def gather(outputs: Sequence[Any], target_device: DeviceLike | None, dim: int = 0) -> Any:
    """Concatenate the replicas' outputs along ``dim`` on ``target_device`` (copies; differentiable).

    Outputs are matched by structure (tensor, None, dict, namedtuple, list, tuple) and dtype, which
    must be the same in every replica.
    All-scalar outputs with dim=0 become a vector of length len(outputs), with PyTorch's warning.
    ``target_device`` accepts "cpu", torch.device, int, -1 (CPU, deprecated) and None (current device).
    """
    dim = check_dim(dim, "gather")
    if len(outputs) == 0:
        raise UsageError("gather: outputs is empty; pass one output per replica")
    return _gather(list(outputs), _gather_target(target_device), dim, "out")


def _target_devices(target_devices: Sequence[DeviceLike], who: str) -> list[torch.device]:
    devices = resolve_devices(target_devices, f"{who}: target_devices")
    if not devices:
        raise UsageError(f"{who}: target_devices is empty; pass at least one device, e.g. ['cpu']")
    return devices


def _scatter(obj: Any, devices: list[torch.device], dim: int) -> Any:
    # PyTorch's recursion order and rebuild rules, kept exactly (see torch/nn/parallel/scatter_gather.py).
    if isinstance(obj, torch.Tensor):
        return Scatter.apply(devices, None, dim, obj)
    if is_namedtuple(obj):
        return [type(obj)(*fields) for fields in zip(*(_scatter(v, devices, dim) for v in obj))]
    if isinstance(obj, tuple) and len(obj) > 0:
        return list(zip(*(_scatter(v, devices, dim) for v in obj)))
    if isinstance(obj, list) and len(obj) > 0:
        return [list(items) for items in zip(*(_scatter(v, devices, dim) for v in obj))]
    if isinstance(obj, dict) and len(obj) > 0:
        return [type(obj)(pairs) for pairs in zip(*(_scatter(item, devices, dim) for item in obj.items()))]
    return [obj for _ in devices]


def _gather_target(target_device: DeviceLike | None) -> torch.device:
    if target_device is None:
        device_type = accelerator_type()
        return torch.device("cpu") if device_type is None else resolve_device(device_type, "target_device")
    if isinstance(target_device, int) and not isinstance(target_device, bool) and target_device == -1:
        warnings.warn(CPU_AS_MINUS_ONE_WARNING, FutureWarning, stacklevel=3)
    return resolve_device(target_device, "gather: target_device")


def _gather(outputs: list[Any], target: torch.device, dim: int, path: str) -> Any:
    out = outputs[0]
    if isinstance(out, torch.Tensor):
        check_concatenable(outputs, dim, path)
        return Gather.apply(target, dim, *outputs)
    if out is None:
        check_all_none(outputs, path)
        return None
    if isinstance(out, dict):
        check_same_container(outputs, path)
        return type(out)((k, _gather([d[k] for d in outputs], target, dim, f"{path}[{k!r}]")) for k in out)
    if isinstance(out, (list, tuple)) and not isinstance(out, torch.Size):
        check_same_container(outputs, path)
        items = [_gather(list(same), target, dim, f"{path}[{i}]") for i, same in enumerate(zip(*outputs))]
        return type(out)._make(items) if is_namedtuple(out) else type(out)(items)
    if _rebuildable(out):
        return _gather_iterable(outputs, target, dim, path)
    raise UsageTypeError(
        f"gather: {path} is {with_article(type(out).__name__)} ({out!r:.60}); gather only joins tensors, None, dicts, "
        "lists, tuples, namedtuples and other iterables of them (rebuilt as type(out)(items), a cache object for "
        f"one). Return other values as tensors or outside the module ({_what_pytorch_does(out)})"
    )


def _rebuildable(out: Any) -> bool:
    # PyTorch rebuilds any other output as type(out)(map(gather_map, zip(*outputs))); text and sets
    # are excluded on purpose (see _what_pytorch_does), so is anything zip cannot iterate.
    return hasattr(out, "__iter__") and not isinstance(out, (str, bytes, bytearray, set, frozenset, torch.Size))


def _gather_iterable(outputs: list[Any], target: torch.device, dim: int, path: str) -> Any:
    """An iterable output (transformers' DynamicCache) joined item by item and rebuilt as PyTorch rebuilds it."""
    items = [list(out) for out in outputs]
    for j, replica_items in enumerate(items[1:], 1):
        if len(replica_items) != len(items[0]):
            raise UsageError(f"gather: {path} has {len(items[0])} items on replica 0 but {len(replica_items)} on "
                             f"replica {j}; every replica must return the same structure")
    gathered = [_gather(list(same), target, dim, f"{path}[{i}]") for i, same in enumerate(zip(*items))]
    name = type(outputs[0]).__name__
    try:
        return type(outputs[0])(iter(gathered))
    except Exception as error:
        raise UsageTypeError(f"gather: {path} is {with_article(name)}, rebuilt as PyTorch's gather rebuilds it, "
                        f"{name}(gathered items), which raised {type(error).__name__}: {error}; return tensors "
                        "or containers of them") from error


def _what_pytorch_does(out: Any) -> str:
    if isinstance(out, str):
        return "PyTorch returns the text of a map object here, pytorch#62466"
    if isinstance(out, (set, frozenset)):
        return "PyTorch pairs the replicas' elements in set iteration order, which is arbitrary"
    if isinstance(out, (bytes, bytearray, torch.Size)):
        return "PyTorch fails too, rebuilding it from gathered ints"
    return f"PyTorch fails too: '{type(out).__name__}' object is not iterable"

