"""Undo the mapped strategies' layout: gather the stacked outputs like torch, without padding rows.

A mapped program returns every output leaf stacked per replica, shape (k, *per_replica_shape).
Gathering it like torch means concatenating the k replicas along `dim` on the output device, then
the short last chunk's own output (uneven='exact'), or dropping the last replica's padding rows
(uneven='pad').
"""
from __future__ import annotations

import functools
import warnings
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from dp_jax.scatter_gather import SCALAR_GATHER_WARNING
from dp_jax.strategies.plan import ShardPlan


def merge_replica_outputs(stacked: Any, plan: ShardPlan, output_device: jax.Device, dim: int, who: str,
                          tail: Any = None) -> Any:
    """Concatenate the per-replica outputs along `dim` on `output_device`: the program's replicas,
    then the short last chunk's own output (`tail`, when the plan has one), without padding rows.

    Transfers every replica's output to output_device, then runs one small cached jit per leaf shape.
    """
    paths_and_leaves, treedef = jax.tree_util.tree_flatten_with_path(stacked)
    no_tail = plan.tail_replica is None
    tail_leaves = [None] * len(paths_and_leaves) if no_tail else _tail_leaves(tail, treedef, plan, who)
    merged = []
    for (path, leaf), tail_leaf in zip(paths_and_leaves, tail_leaves):
        name = "output" + jax.tree_util.keystr(path)
        per_replica = leaf.shape[1:]
        axis = dim % len(per_replica) if per_replica else 0
        if plan.pad_rows and (not per_replica or per_replica[axis] != plan.shard_size):
            raise ValueError(  # uneven='pad' refuses this before running (check_outputs_grow); 'pad_unchecked' here
                f"{who}: {name} has shape {tuple(per_replica)} per replica, not {plan.shard_size} rows along "
                f"dim={dim}, so the padding rows cannot be dropped from it; use uneven='exact' (the default)")
        if tail_leaf is not None:
            _check_like_replica_0(tail_leaf, leaf, name, plan.tail_replica, dim, who)
        if not per_replica:
            if dim != 0:
                raise ValueError(f"{who}: {name} is a scalar per replica and dim={dim}; scalars can only "
                                 "be gathered along dim=0 (into a vector with one value per replica)")
            warnings.warn(SCALAR_GATHER_WARNING, UserWarning, stacklevel=4)
        moved = jax.device_put(leaf, output_device)
        if tail_leaf is not None:
            merged.append(_concat_with_tail(moved, jax.device_put(tail_leaf, output_device), axis=axis))
        else:
            merged.append(_concat_replicas(moved, axis=axis, rows=plan.batch_size if plan.pad_rows else None)
                          if per_replica else moved)
    return treedef.unflatten(merged)


def _tail_leaves(tail: Any, treedef: Any, plan: ShardPlan, who: str) -> list[Any]:
    other = jax.tree_util.tree_structure(tail)
    if other != treedef:
        raise ValueError(
            f"{who}: replica {plan.tail_replica} (the short last chunk) returned structure {other} but replica 0 "
            f"returned {treedef}; every replica must return the same pytree structure"
        )
    return treedef.flatten_up_to(tail)


def _check_like_replica_0(tail_leaf: Any, stacked_leaf: Any, name: str, replica: int, dim: int, who: str) -> None:
    """The short chunk's leaf has replica 0's dtype and shape except along `dim`, as gather requires."""
    first = stacked_leaf.shape[1:]
    if tail_leaf.dtype != stacked_leaf.dtype:
        raise TypeError(f"{who}: {name} has dtype {tail_leaf.dtype} in replica {replica} but {stacked_leaf.dtype} "
                        "in replica 0; every replica must return the same dtype (cast inside apply_fn)")
    axis = dim % len(first) if first else None
    same = len(tail_leaf.shape) == len(first) and all(
        a == b for i, (a, b) in enumerate(zip(tail_leaf.shape, first)) if i != axis)
    if not same:
        raise ValueError(
            f"{who}: {name} has shape {tuple(tail_leaf.shape)} in replica {replica} but {tuple(first)} in replica 0; "
            f"shapes must match in every dimension except dim={dim} (the one gathered): return same-shaped "
            "outputs, or gather along the batch dim"
        )


@functools.partial(jax.jit, static_argnames=("axis",))
def _concat_with_tail(stacked: jax.Array, tail: jax.Array, axis: int) -> jax.Array:
    if stacked.ndim == 1:  # one scalar per replica: torch's gather makes them a vector
        return jnp.concatenate([stacked, tail[None]])
    moved = jnp.moveaxis(stacked, 0, axis)
    merged = moved.reshape(moved.shape[:axis] + (-1,) + moved.shape[axis + 2 :])
    return jnp.concatenate([merged, tail], axis=axis)


@functools.partial(jax.jit, static_argnames=("axis", "rows"))
def _concat_replicas(stacked: jax.Array, axis: int, rows: int | None) -> jax.Array:
    moved = jnp.moveaxis(stacked, 0, axis)
    merged = moved.reshape(moved.shape[:axis] + (-1,) + moved.shape[axis + 2 :])
    return merged if rows is None else lax.slice_in_dim(merged, 0, rows, axis=axis)
