"""Walkers behind `placement_of`: find every tensor of a torch or JAX value, its device and its memory.

torch and JAX are imported inside the functions that meet their types, never at module level.
Nothing here imports the rest of the package but `errors`; `_map` turns the Leaves into records.
"""
from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from comparisons.errors import UsageTypeError

_PREFIXES = {"torch": ("torch",), "jax": ("jax", "jaxlib", "flax")}


class Leaf(NamedTuple):
    replica: int | None
    path: str
    role: str
    value: Any          # a torch tensor or a single-device jax array (one shard)
    device: str


def _is_from(obj: Any, backend: str) -> bool:
    return any(cls.__module__.split(".")[0] in _PREFIXES[backend] for cls in type(obj).__mro__)


def backend_of(obj: Any) -> str | None:
    """'torch' or 'jax' for the first framework value found in `obj` (containers searched)."""
    for backend in _PREFIXES:
        if _is_from(obj, backend):
            return backend
    if isinstance(obj, Mapping):
        children = obj.values()
    elif isinstance(obj, Sequence) and not isinstance(obj, (str, bytes)):
        children = obj
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        children = [getattr(obj, f.name) for f in dataclasses.fields(obj)]
    else:
        children = _registered_children(obj)
    return next((b for b in map(backend_of, children) if b is not None), None)


def _registered_children(obj: Any) -> list:
    """Leaves of `obj` as a pytree node registered with torch or JAX (either already imported)."""
    torch_pytree = sys.modules.get("torch.utils._pytree")
    if torch_pytree is not None and type(obj) in torch_pytree.SUPPORTED_NODES:
        return torch_pytree.tree_leaves(obj)
    tree_util = sys.modules.get("jax.tree_util")
    if tree_util is not None:
        leaves = tree_util.tree_leaves(obj)
        if leaves != [obj]:
            return leaves
    return []


def device_label(device: Any) -> str:
    """"cuda:1", "cpu", "vdev:2" for torch devices; "cpu:3" for JAX's CPU device 3."""
    if isinstance(device, str):
        return device
    if hasattr(device, "platform") and hasattr(device, "id"):
        return f"{device.platform}:{device.id}"
    if type(device).__module__.startswith("torch"):
        return str(device)
    raise UsageTypeError(f"placement_of: device {device!r} is not a torch.device, jax.Device or str")


def _per_replica(obj: Any, backend: str, per_replica: bool | None) -> bool:
    if per_replica is not None:
        return per_replica
    if backend != "torch" or not isinstance(obj, (list, tuple)) or not obj:
        return False
    import torch

    return all(isinstance(m, torch.nn.Module) for m in obj)


def items(obj: Any, backend: str, role: str | None, name: str, per_replica: bool | None,
          labels: list[str] | None = None) -> Iterator[Leaf]:
    """Every tensor of `obj`, one Leaf each (one per shard for multi-device JAX arrays)."""
    walk = _torch_items if backend == "torch" else _jax_items
    if _per_replica(obj, backend, per_replica):
        for index, element in enumerate(obj):
            yield from walk(element, index, role, name, labels)
    else:
        yield from walk(obj, None, role, name, labels)


def _torch_items(obj, replica, role, name, labels) -> Iterator[Leaf]:
    import torch

    if isinstance(obj, torch.nn.Module):
        yield from _module_items(obj, replica)
        return
    for path, value in torch_leaves_with_paths(obj):
        if isinstance(value, torch.Tensor):
            yield Leaf(replica, name + path, role or "input", value, str(value.device))


def key_path_str(path: Sequence[Any]) -> str:
    """".logits.0" for a torch or JAX key path: a field, a mapping key and an attribute all print as
    their name, so a torch ModelOutput (a dict) and a Flax one (a dataclass) get one path, spelled as
    every other path of a report (`canonical_path`)."""
    parts = []
    for key in path:
        if hasattr(key, "idx"):  # SequenceKey
            parts.append(f".{key.idx}")
        elif hasattr(key, "name"):  # GetAttrKey (namedtuple and dataclass fields)
            parts.append(f".{key.name}")
        else:  # MappingKey / DictKey / FlattenedIndexKey
            parts.append(f".{key.key}")
    return "".join(parts)


def torch_leaves_with_paths(obj: Any) -> list[tuple[str, Any]]:
    """(path, leaf) of a torch pytree, in torch's flatten order, paths as `key_path_str` prints them ('.0').

    A type registered with torch's pytree without key functions (transformers registers its
    ModelOutput so) has no key path; its children are named from the spec's context when that is
    its list of keys (as for a mapping), else by position.
    """
    from torch.utils import _pytree

    try:
        return [(key_path_str(path), leaf) for path, leaf in _pytree.tree_flatten_with_path(obj)[0]]
    except ValueError:  # "Did not find a flatten_with_keys_fn for type ..."
        leaves, spec = _pytree.tree_flatten(obj)
        return list(zip(_spec_paths(spec, ""), leaves))


def _spec_paths(spec: Any, prefix: str) -> Iterator[str]:
    """The paths of a torch pytree spec's leaves, dotted as `key_path_str` prints them."""
    if spec.is_leaf():
        yield prefix
        return
    context, children = spec.context, spec.children()
    keyed = isinstance(context, (list, tuple)) and len(context) == len(children) \
        and all(isinstance(k, (str, int)) for k in context) and not issubclass(spec.type, (list, tuple))
    for index, child in enumerate(children):
        key = f".{context[index]}" if keyed else f".{index}"
        yield from _spec_paths(child, prefix + key)


def _module_items(module, replica) -> Iterator[Leaf]:
    # A torch replica keeps its parameters outside `_parameters` (plain attributes listed in
    # `_former_parameters`), so named_parameters() is empty there; read the slots by name.
    for prefix, sub in module.named_modules():
        dotted = f"{prefix}." if prefix else ""
        slots = dict.fromkeys([*sub._parameters, *getattr(sub, "_former_parameters", {})])
        for key in slots:
            param = getattr(sub, key, None)
            if param is None:
                continue
            yield Leaf(replica, dotted + key, "param", param, str(param.device))
            if param.is_leaf and param.grad is not None:
                yield Leaf(replica, dotted + key, "grad", param.grad, str(param.grad.device))
        for key, buffer in sub._buffers.items():
            if buffer is not None:
                yield Leaf(replica, dotted + key, "buffer", buffer, str(buffer.device))


def _jax_items(obj, replica, role, name, labels) -> Iterator[Leaf]:
    import jax

    variables = role is None and isinstance(obj, Mapping) and "params" in obj
    for path, value in jax.tree_util.tree_flatten_with_path(obj)[0]:
        if not isinstance(value, jax.Array):
            continue
        if variables:
            leaf_path = jax.tree_util.keystr(path, simple=True, separator=".")
            leaf_role = "param" if leaf_path.startswith("params.") else "buffer"
        else:
            leaf_path, leaf_role = name + key_path_str(path), role or "input"
        shards = value.addressable_shards
        if len(shards) == 1:
            yield Leaf(replica, leaf_path, leaf_role, value, device_label(shards[0].device))
            continue
        for position, shard in enumerate(shards):
            label = device_label(shard.device)
            index = labels.index(label) if labels and label in labels else position
            yield Leaf(index, leaf_path, leaf_role, shard.data, label)


def alias_key(value: Any) -> tuple[str, int] | None:
    """Identity of the memory behind a tensor: equal keys mean the two share storage."""
    if _is_from(value, "jax"):
        return ("jax", value.unsafe_buffer_pointer())
    if value.device.type == virtual_device_type():
        from dp_torch import virtual

        value = virtual.cpu_view(value)  # virtual tensors have no storage of their own
    if value.device.type == "meta":
        return None
    return ("torch", value.untyped_storage().data_ptr())


def virtual_device_type() -> str | None:
    """The device type of dp_torch's virtual devices ("vdev" by default), or None if none are installed.

    `virtual.install(name=...)` picks the name; only a process that imported dp_torch.virtual
    can have installed it, so this never imports it (nor torch).
    """
    virtual = sys.modules.get("dp_torch.virtual")
    if virtual is None or not virtual.is_installed():
        return None
    return virtual.devices()[0].type


def reference_keys(original: Any, backend: str, role: str | None, name: str
                   ) -> dict[tuple[str, str], tuple[str, int]]:
    """(role, path) -> alias key of every tensor in the original value."""
    return {(leaf.role, leaf.path): alias_key(leaf.value)
            for leaf in items(original, backend, role, name, per_replica=False)}
