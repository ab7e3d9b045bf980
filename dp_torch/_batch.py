"""Input checks for scatter and gather, with error messages that name the pytree path.

The walks below follow PyTorch's scatter recursion order on purpose (Tensor, namedtuple, non-empty
tuple, list, dict; anything else is an opaque leaf), so torch.utils._pytree is not used.
"""
from __future__ import annotations

import dataclasses
import operator
import types
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import nn

from dp_torch._errors import UsageError, UsageTypeError


def is_namedtuple(obj: Any) -> bool:
    """True for instances of collections.namedtuple / typing.NamedTuple classes (PyTorch's test)."""
    return isinstance(obj, tuple) and hasattr(obj, "_asdict") and hasattr(obj, "_fields")


def check_dim(dim: Any, who: str) -> int:
    """``dim`` as an int (anything with ``__index__`` but bool), or a TypeError naming it."""
    try:
        if isinstance(dim, bool):
            raise TypeError
        return operator.index(dim)
    except TypeError:
        raise UsageTypeError(
            f"{who}: dim={dim!r} is not an int; pass the batch dimension as an int, e.g. dim=0 (dim=-1 for the last)"
        ) from None


def _dim_range(dim: int, path: str, shape: torch.Size, who: str) -> IndexError:
    return IndexError(
        f"{who}: dim={dim} is out of range for {path} of shape {tuple(shape)}; "
        f"pass a dim between {-len(shape)} and {len(shape) - 1}"
    )


def scatter_leaves(obj: Any, path: str) -> Iterator[tuple[str, Any]]:
    """Yield ``(path, leaf)`` in scatter's order: tensors (split) and any other object (shared whole)."""
    if isinstance(obj, torch.Tensor):
        yield path, obj
    elif is_namedtuple(obj):
        for name, value in zip(obj._fields, obj):
            yield from scatter_leaves(value, f"{path}.{name}")
    elif isinstance(obj, (tuple, list)):
        for i, value in enumerate(obj):
            yield from scatter_leaves(value, f"{path}[{i}]")
    elif isinstance(obj, dict):
        for key, value in obj.items():
            yield from scatter_leaves(value, f"{path}[{key!r}]")
    else:
        yield path, obj


def tensor_leaves(obj: Any, path: str) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``(path, tensor)`` for every tensor that scatter would split, in scatter's order."""
    return ((p, leaf) for p, leaf in scatter_leaves(obj, path) if isinstance(leaf, torch.Tensor))


def check_splittable(leaves: Sequence[tuple[str, torch.Tensor]], dim: int, who: str) -> int | None:
    """Every leaf must have ``dim`` and the same size along it (PyTorch would silently truncate).

    Returns that size (the batch), or None when there are no leaves.
    """
    first_path, first_size = None, None
    for path, tensor in leaves:
        if tensor.dim() == 0:
            raise RuntimeError(
                f"{who}: leaf {path} is a 0-dim tensor, which cannot be split along dim {dim}; "
                f"give it a batch dimension (e.g. {path}.expand(batch)) or pass a Python number instead"
            )
        if not -tensor.dim() <= dim < tensor.dim():
            raise _dim_range(dim, f"leaf {path}", tensor.shape, who)
        size = tensor.size(dim)
        if first_path is None:
            first_path, first_size = path, size
        elif size != first_size:
            raise UsageError(
                f"{who}: leaf {path} has batch {size} but {first_path} has {first_size}; "
                f"all tensors split along dim {dim} must have the same size"
            )
    return first_size


def check_concatenable(tensors: Sequence[Any], dim: int, path: str) -> None:
    """Replica outputs at ``path`` must be tensors that torch.cat can join along ``dim``."""
    for j, t in enumerate(tensors):
        if not isinstance(t, torch.Tensor):
            raise UsageTypeError(
                f"gather: {path} is a Tensor in replica 0 but {type(t).__name__} in replica {j}; "
                "every replica must return the same structure"
            )
        if t.dtype != tensors[0].dtype:
            raise UsageTypeError(
                f"gather: {path} has dtype {t.dtype} in replica {j} but {tensors[0].dtype} in replica 0; "
                "every replica must return the same dtype (cast inside forward); PyTorch would silently "
                "cast to replica 0's dtype"
            )
    if dim == 0 and all(t.dim() == 0 for t in tensors):
        return  # gathered into a vector, with PyTorch's warning
    ref = tensors[0]
    for j, t in enumerate(tensors):
        if t.dim() == 0:
            raise IndexError(
                f"gather: {path} is 0-dim in replica {j} and cannot be concatenated along dim {dim}; "
                "scalars are gathered (into one entry per replica) only when every replica returns one and dim=0"
            )
        if t.dim() != ref.dim():
            raise RuntimeError(
                f"gather: {path} has shape {tuple(t.shape)} in replica {j} but {tuple(ref.shape)} in replica 0; "
                f"replica outputs must have the same rank to be concatenated along dim {dim}"
            )
        if not -t.dim() <= dim < t.dim():
            raise _dim_range(dim, path, t.shape, "gather")
        if t.shape != ref.shape and _without(t.shape, dim) != _without(ref.shape, dim):
            raise RuntimeError(
                f"gather: {path} has shape {tuple(t.shape)} in replica {j} but {tuple(ref.shape)} in replica 0; "
                f"all dims except dim {dim} must match"
            )


def _without(shape: torch.Size, dim: int) -> tuple[int, ...]:
    dims = list(shape)
    del dims[dim]
    return tuple(dims)


def check_all_none(outputs: Sequence[Any], path: str) -> None:
    """Replica 0 returned None at ``path``: so must every replica (PyTorch would drop their values)."""
    for j, out in enumerate(outputs):
        if out is not None:
            found = with_article(type(out).__name__)
            raise UsageTypeError(
                f"gather: {path} is None in replica 0 but {found} in replica {j}; every replica "
                "must return the same structure (a forward that returns None for some inputs drops the other "
                "replicas' results)"
            )


def with_article(noun: str) -> str:
    """``"a Tensor"``, ``"an int"``: for messages that name a type."""
    return f"an {noun}" if noun[0].lower() in "aeiou" else f"a {noun}"


def check_no_hidden_batch(inputs: Any, path: str, batch: int | None, dim: int, n_devices: int, who: str) -> None:
    """Refuse objects scatter does not look inside (dataclasses, plain objects) that hold the batch.

    Scatter gives such an object whole to every replica (as PyTorch does), so a batch inside it is
    computed n times over: 10 rows come back as 40 on 4 devices. A held tensor counts as the batch
    when its size along ``dim`` is ``batch``, or, when nothing else is split, whenever it has ``dim``.
    One replica (one device, or a batch of 1) sees the object once, so nothing is refused then.
    """
    if n_devices == 1 or batch == 1:
        return
    shared = ((p, leaf) for p, leaf in scatter_leaves(inputs, path) if not isinstance(leaf, torch.Tensor))
    for leaf_path, obj in shared:
        for attr_path, tensor in _held_tensors(obj):
            if tensor.dim() == 0 or not -tensor.dim() <= dim < tensor.dim():
                continue
            size = tensor.size(dim)
            if batch is None or size == batch:
                kind = with_article(type(obj).__name__) + (" (a dataclass)" if dataclasses.is_dataclass(obj) else "")
                raise UsageTypeError(
                    f"{who}: {leaf_path} is {kind} holding {attr_path} with {size} rows "
                    f"along dim {dim}; scatter does not look inside it, so every replica would get all {size} rows "
                    "(PyTorch returns n times the rows). Pass the tensors in a dict, list, tuple or namedtuple "
                    "(e.g. a typing.NamedTuple instead of the dataclass), or as separate arguments"
                )


def _held_tensors(obj: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """Tensors held by a dataclass's fields or a plain object's attributes (one level, then containers)."""
    if isinstance(obj, (type, types.ModuleType, nn.Module)):
        return
    if dataclasses.is_dataclass(obj):
        attributes = {f.name: getattr(obj, f.name, None) for f in dataclasses.fields(obj)}
    else:
        attributes = getattr(obj, "__dict__", None)
        if not isinstance(attributes, dict):
            return
    for name, value in attributes.items():
        yield from tensor_leaves(value, f".{name}")


def check_same_container(outputs: Sequence[Any], path: str) -> None:
    """Replica outputs at ``path`` must be containers of replica 0's kind and length."""
    ref = outputs[0]
    kind = dict if isinstance(ref, dict) else (list, tuple)
    for j, out in enumerate(outputs):
        if not isinstance(out, kind):
            raise UsageTypeError(
                f"gather: {path} is a {type(ref).__name__} in replica 0 but {type(out).__name__} in replica {j}; "
                "every replica must return the same structure"
            )
        if isinstance(ref, dict):
            _check_same_keys(ref, out, path, j)
        elif len(out) != len(ref):
            raise UsageError(
                f"gather: {path} has length {len(out)} in replica {j} but {len(ref)} in replica 0; "
                "every replica must return the same structure"
            )


def _check_same_keys(ref: dict, out: dict, path: str, j: int) -> None:
    if len(out) != len(ref):
        raise UsageError(
            f"All dicts must have the same number of keys: {path} has keys {list(out)} in replica {j} "
            f"but {list(ref)} in replica 0"
        )
    missing = [k for k in ref if k not in out]
    if missing:
        raise KeyError(
            f"gather: {path} in replica {j} lacks key {missing[0]!r}: its keys are {list(out)} but replica 0 "
            f"has {list(ref)}; every replica must return the same keys"
        )
