"""Inputs of the mapped strategies: split args/kwargs into batched arrays and static values, cut, pad, place.

Arrays (jax or numpy) are split along `dim` like torch splits tensors; every other leaf (a bool
`train` flag, a string) is passed to every replica unchanged and is part of the compile key, so
it must be hashable.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding

from dp_jax._batch import common_batch, labelled_leaves
from dp_jax._devices import is_array_leaf
from dp_jax.strategies.mesh import spec_at
from dp_jax.strategies.plan import ShardPlan


class SplitArgs(NamedTuple):
    """(args, kwargs) as a treedef, the static leaves (position, value) and the array leaves."""

    treedef: Any
    static: tuple[tuple[int, Any], ...]
    arrays: list[Any]
    axes: list[int]

    def rebuild(self, arrays: list[Any]) -> tuple[tuple, dict]:
        """(args, kwargs) with `arrays` (e.g. one replica's shards) in place of the array leaves."""
        static = dict(self.static)
        it = iter(arrays)
        leaves = [static[i] if i in static else next(it) for i in range(len(static) + len(arrays))]
        return jax.tree_util.tree_unflatten(self.treedef, leaves)


def batch_size_of(args: tuple, kwargs: dict, dim: int, who: str) -> int | None:
    """The size along `dim` shared by every array in (args, kwargs); None when there is no array."""
    return common_batch(labelled_leaves({"args": tuple(args), "kwargs": dict(kwargs)}), dim, who)


def split_args(args: tuple, kwargs: dict, dim: int, who: str) -> tuple[SplitArgs, int | None]:
    """Split (args, kwargs) and return it with the common batch size along `dim` (None: no arrays)."""
    args, kwargs = tuple(args), dict(kwargs)
    labelled = labelled_leaves({"args": args, "kwargs": kwargs})  # the order of flattening (args, kwargs)
    batch = common_batch(labelled, dim, who)
    static, arrays = [], []
    for position, (name, leaf) in enumerate(labelled):
        if is_array_leaf(leaf):
            arrays.append(leaf)
        else:
            _require_hashable(leaf, name, who)
            static.append((position, leaf))
    axes = [dim % x.ndim for x in arrays]
    return SplitArgs(jax.tree_util.tree_structure((args, kwargs)), tuple(static), arrays, axes), batch


def _require_hashable(leaf: Any, name: str, who: str) -> None:
    try:
        hash(leaf)
    except TypeError:
        raise TypeError(
            f"{who}: leaf {name} of type {type(leaf).__name__} is neither an array nor hashable; "
            "non-array arguments are compile-time constants here, so pass it as an array or a hashable value"
        ) from None


def pad_to(x: Any, axis: int, rows: int) -> Any:
    """`x` with its last row along `axis` repeated up to `rows` rows (finite data, unlike zeros)."""
    missing = rows - x.shape[axis]
    if missing == 0:
        return x
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, missing)
    return np.pad(x, widths, mode="edge") if isinstance(x, np.ndarray) else jnp.pad(x, widths, mode="edge")


def split_replica_axis(x: Any, axis: int, replicas: int) -> Any:
    """Reshape `axis` of size k*c into (k, c): axis `axis` then indexes the replica."""
    shape = x.shape
    return x.reshape(shape[:axis] + (replicas, shape[axis] // replicas) + shape[axis + 1 :])


def rows_of(x: Any, axis: int, start: int, stop: int) -> Any:
    """Rows start..stop-1 of `x` along `axis` (a view for numpy; one slicing dispatch for a jax array)."""
    if start == 0 and stop == x.shape[axis]:
        return x
    return x[(slice(None),) * axis + (slice(start, stop),)]


def place_arrays(split: SplitArgs, plan: ShardPlan, mesh: Any, name: str, stacked: bool) -> list[Any]:
    """The arrays of the mapped program's replicas, padded if the plan pads, optionally reshaped to
    (replicas, c), sharded over `mesh`.

    Copies: the padded array (if padding) and one host-to-device or device-to-device transfer.
    """
    replicas, rows = plan.mapped_replicas, plan.mapped_replicas * plan.shard_size
    placed = []
    for x, axis in zip(split.arrays, split.axes):
        x = pad_to(rows_of(x, axis, 0, min(rows, x.shape[axis])), axis, rows)
        if stacked:
            x = split_replica_axis(x, axis, replicas)
        placed.append(jax.device_put(x, NamedSharding(mesh, spec_at(axis, name))))
    return placed


def place_tail(split: SplitArgs, plan: ShardPlan) -> list[Any]:
    """The short last chunk's arrays, committed to its device (as scatter places a chunk)."""
    start = plan.mapped_replicas * plan.shard_size
    device = plan.devices[plan.tail_replica]
    return [jax.device_put(rows_of(x, axis, start, x.shape[axis]), device) for x, axis in zip(split.arrays, split.axes)]
