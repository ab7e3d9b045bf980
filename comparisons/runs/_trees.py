"""Model outputs as plain trees: {name: numpy array | subtree}, one shape for torch and for Flax.

A torch `ModelOutput` is a dict, a Flax one a dataclass; a tuple is a sequence either way, and
any other iterable (a cache object) is read by position. All become nested dicts keyed by field,
mapping key or position ('0'), with None fields dropped, so
outputs compare leaf by leaf by path (the judge's `flatten` names them 'logits', 'hidden.0').
"""
from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np


def to_numpy(value: Any) -> np.ndarray:
    """A host copy of a torch tensor (any device), a JAX array or an array-like (never a view)."""
    if any(cls.__module__.startswith("torch") for cls in type(value).__mro__):  # subclasses too
        value = value.detach().to("cpu").numpy()
    return np.array(value, copy=True)


def output_tree(value: Any) -> Any:
    """`value` as nested dicts of host numpy arrays (a copy); a bare array stays an array."""
    children = _children(value)
    if children is None:
        return to_numpy(value)
    tree = {str(key): output_tree(child) for key, child in children if child is not None}
    return {key: child for key, child in tree.items() if not (isinstance(child, dict) and not child)}


def _children(value: Any) -> list[tuple[Any, Any]] | None:
    if isinstance(value, Mapping):
        return list(value.items())
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple
        return list(zip(value._fields, value))
    if isinstance(value, (list, tuple)):
        return list(enumerate(value))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [(f.name, getattr(value, f.name)) for f in dataclasses.fields(value)]
    registered = _registered(value)
    if registered is not None or hasattr(value, "shape") or isinstance(value, (str, bytes)):
        return registered
    if hasattr(value, "__iter__"):  # e.g. transformers' DynamicCache: (keys, values) per layer
        return list(enumerate(value))
    return None


def _registered(value: Any) -> list[tuple[Any, Any]] | None:
    """Children of a torch pytree node of another kind (e.g. a cache object), by position."""
    torch_pytree = sys.modules.get("torch.utils._pytree")
    if torch_pytree is not None and type(value) in torch_pytree.SUPPORTED_NODES:
        children, _ = torch_pytree.SUPPORTED_NODES[type(value)].flatten_fn(value)
        return list(enumerate(children))
    return None
