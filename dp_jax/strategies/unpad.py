"""Undo the mapped strategies' layout: gather the stacked outputs like torch, without padding rows.

A mapped program returns every output leaf stacked per replica, shape (k, *per_replica_shape).
Gathering it like torch means concatenating the k replicas along `dim` on the output device,
then dropping the rows past the batch: the short chunk's filled rows (uneven='exact', the leaves
the switch program's `Filled` marks) or the last replica's padding rows (uneven='pad').
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
from dp_jax.strategies.switch import Filled


def merge_replica_outputs(stacked: Any, plan: ShardPlan, output_device: jax.Device, dim: int, who: str,
                          filled: Filled | None = None) -> Any:
    """Concatenate the per-replica outputs along `dim` on `output_device`, without rows past the batch.

    Transfers every replica's output to output_device, then runs one small cached jit per leaf shape.
    """
    paths_and_leaves, treedef = jax.tree_util.tree_flatten_with_path(stacked)
    grown = filled.leaves if filled is not None else (bool(plan.pad_rows),) * len(paths_and_leaves)
    merged = []
    for (path, leaf), cut in zip(paths_and_leaves, grown):
        name = "output" + jax.tree_util.keystr(path)
        per_replica = leaf.shape[1:]
        axis = dim % len(per_replica) if per_replica else 0
        if plan.pad_rows and (not per_replica or per_replica[axis] != plan.shard_size):
            raise ValueError(  # uneven='pad' refuses this before running (check_outputs_grow); 'pad_unchecked' here
                f"{who}: {name} has shape {tuple(per_replica)} per replica, not {plan.shard_size} rows along "
                f"dim={dim}, so the padding rows cannot be dropped from it; use uneven='exact' (the default)")
        if not per_replica:
            if dim != 0:
                raise ValueError(f"{who}: {name} is a scalar per replica and dim={dim}; scalars can only "
                                 "be gathered along dim=0 (into a vector with one value per replica)")
            warnings.warn(SCALAR_GATHER_WARNING, UserWarning, stacklevel=4)
        moved = jax.device_put(leaf, output_device)
        merged.append(_concat_replicas(moved, axis=axis, rows=plan.batch_size if cut else None)
                      if per_replica else moved)
    return treedef.unflatten(merged)


@functools.partial(jax.jit, static_argnames=("axis", "rows"))
def _concat_replicas(stacked: jax.Array, axis: int, rows: int | None) -> jax.Array:
    moved = jnp.moveaxis(stacked, 0, axis)
    merged = moved.reshape(moved.shape[:axis] + (-1,) + moved.shape[axis + 2 :])
    return merged if rows is None else lax.slice_in_dim(merged, 0, rows, axis=axis)
