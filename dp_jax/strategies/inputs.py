"""Inputs of the mapped strategies: split args/kwargs into batched arrays and static values, cut, pad, place.

Arrays (jax or numpy) are split along `dim` like torch splits tensors; every other leaf (a bool
`train` flag, a string) is passed to every replica unchanged and is part of the compile key, so
it must be hashable.
"""
from __future__ import annotations

import functools
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


def cut_for(split: SplitArgs, plan: ShardPlan) -> tuple[SplitArgs, SplitArgs | None]:
    """(the program's rows, the short last chunk's rows) of every array; (split, None) without an own call.

    numpy arrays are cut as views; jax arrays by one small jitted program per shape (one dispatch).
    """
    if plan.tail_replica is None:
        return split, None
    rows = plan.mapped_replicas * plan.shard_size
    is_jax = [isinstance(x, jax.Array) for x in split.arrays]
    cut_jax = iter(_cut([x for x, j in zip(split.arrays, is_jax) if j],
                        tuple(a for a, j in zip(split.axes, is_jax) if j), rows))
    pieces = [next(cut_jax) if j else np.split(x, [rows], axis=axis)
              for x, axis, j in zip(split.arrays, split.axes, is_jax)]
    return split._replace(arrays=[head for head, _ in pieces]), split._replace(arrays=[tail for _, tail in pieces])


@functools.partial(jax.jit, static_argnums=(1, 2))
def _cut(arrays: list[Any], axes: tuple[int, ...], rows: int) -> list[tuple[Any, Any]]:
    return [tuple(jnp.split(x, [rows], axis=axis)) for x, axis in zip(arrays, axes)]


def place_arrays(split: SplitArgs, plan: ShardPlan, mesh: Any, name: str, stacked: bool) -> list[Any]:
    """The arrays of the mapped program's replicas, padded if the plan pads, optionally reshaped to
    (replicas, c), sharded over `mesh`.

    Copies: the padded array (if padding) and one host-to-device or device-to-device transfer.
    """
    replicas, rows = plan.mapped_replicas, plan.mapped_replicas * plan.shard_size
    placed = []
    for x, axis in zip(split.arrays, split.axes):  # (the program's rows only: see cut_for)
        x = pad_to(x, axis, rows)
        if stacked:
            x = split_replica_axis(x, axis, replicas)
        placed.append(jax.device_put(x, NamedSharding(mesh, spec_at(axis, name))))
    return placed


def place_tail(tail: SplitArgs, plan: ShardPlan) -> list[Any]:
    """The short last chunk's arrays (from cut_for), committed to its device, as scatter places a chunk."""
    return jax.device_put(tail.arrays, plan.devices[plan.tail_replica])
