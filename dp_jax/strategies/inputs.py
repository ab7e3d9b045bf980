"""Inputs of the mapped strategies: split args/kwargs into batched arrays and static values, lay out, place.

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
from dp_jax._errors import UsageTypeError
from dp_jax.strategies.mesh import spec_at
from dp_jax.strategies.plan import ShardPlan
from dp_jax.strategies.switch import lay_out_slots


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
        raise UsageTypeError(
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


def place_arrays(split: SplitArgs, plan: ShardPlan, mesh: Any, name: str, stacked: bool) -> list[Any]:
    """The program's input arrays, one block of c rows per replica, sharded over `mesh` on `name`.

    An uneven batch (uneven='exact') is laid out in slots, zeros past the batch that no replica
    reads (switch.py); a padded one repeats its last row (uneven='pad'); `stacked` reshapes the
    rows to (replicas, c) at the axis. Costs: one transfer per array, and for JAX arrays one
    dispatch to lay out an uneven batch (or to reshape an even one when stacked).
    """
    replicas, c = len(plan.devices), plan.shard_size
    if plan.short_replica is not None:
        arrays = lay_out_slots(split.arrays, tuple(split.axes), replicas, c, stacked)
    else:
        arrays = [pad_to(x, axis, replicas * c) for x, axis in zip(split.arrays, split.axes)]
        if stacked:
            arrays = [split_replica_axis(x, axis, replicas) for x, axis in zip(arrays, split.axes)]
    return [jax.device_put(x, NamedSharding(mesh, spec_at(axis, name))) for x, axis in zip(arrays, split.axes)]
