"""Undo the mapped strategies' layout: refuse what padding would change, then gather and unpad.

A mapped program returns every output leaf stacked per replica, shape (k, *per_replica_shape).
Gathering it like torch means concatenating the k replicas along `dim` on the output device and
dropping the padding rows of the last replica.
"""
from __future__ import annotations

import functools
import warnings
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from dp_jax.scatter_gather import SCALAR_GATHER_WARNING
from dp_jax.strategies.plan import ShardPlan, even_batch_sizes_near


def _padding_story(plan: ShardPlan, n_devices: int) -> str:
    return (f"a batch of {plan.batch_size} rows on {n_devices} devices runs {len(plan.devices)} replicas "
            f"(chunks {', '.join(map(str, plan.chunk_sizes))}), padded to {plan.padded_size} rows")


def _fixes(plan: ShardPlan, n_devices: int) -> str:
    below, above = even_batch_sizes_near(plan.batch_size, n_devices)
    return f"use strategy='explicit', or a batch size that splits into equal chunks (e.g. {below} or {above})"


def check_padding_allowed(plan: ShardPlan, who: str, *, updates_collections: bool, axis_name: str | None,
                          uses_rngs: bool, n_devices: int) -> None:
    """Raise when padding could change a visible number: collections, collectives or random draws."""
    if not plan.pad_rows:
        return
    if uses_rngs:
        raise ValueError(
            f"{who}: {_padding_story(plan, n_devices)}, and the last replica's random draws (rngs, e.g. dropout masks) "
            f"would be drawn for the padded shape, which need not match the unpadded draws; {_fixes(plan, n_devices)}"
        )
    if updates_collections:
        raise ValueError(
            f"{who}: {_padding_story(plan, n_devices)}, and the updated (mutable) collections, e.g. BatchNorm "
            f"batch statistics, would include the padding rows; {_fixes(plan, n_devices)}"
        )
    if axis_name is not None:
        raise ValueError(
            f"{who}: {_padding_story(plan, n_devices)}, and collectives over axis_name={axis_name!r} would include "
            f"the padding rows; {_fixes(plan, n_devices)}"
        )


def merge_replica_outputs(stacked: Any, plan: ShardPlan, output_device: jax.Device, dim: int, who: str,
                          n_devices: int) -> Any:
    """Concatenate the per-replica outputs along `dim` on `output_device`, without padding rows.

    Transfers every replica's output to output_device, then runs one small cached jit per leaf shape.
    """
    paths_and_leaves, treedef = jax.tree_util.tree_flatten_with_path(stacked)
    merged = []
    for path, leaf in paths_and_leaves:
        name = "output" + jax.tree_util.keystr(path)
        per_replica = leaf.shape[1:]
        axis = dim % len(per_replica) if per_replica else 0
        if plan.pad_rows and (not per_replica or per_replica[axis] != plan.shard_size):
            raise ValueError(
                f"{who}: {name} has shape {tuple(per_replica)} per replica, not {plan.shard_size} rows along "
                f"dim {dim}, so padding rows cannot be dropped from it ({_padding_story(plan, n_devices)}); "
                f"reduce over rows after the gather, or {_fixes(plan, n_devices)}"
            )
        if not per_replica:
            if dim != 0:
                raise ValueError(f"{who}: {name} is a scalar per replica and dim={dim}; scalars can only "
                                 "be gathered along dim=0 (into a vector with one value per replica)")
            warnings.warn(SCALAR_GATHER_WARNING, UserWarning, stacklevel=4)
        moved = jax.device_put(leaf, output_device)
        merged.append(_concat_replicas(moved, axis=axis, rows=plan.batch_size if plan.pad_rows else None)
                      if per_replica else moved)
    return treedef.unflatten(merged)


@functools.partial(jax.jit, static_argnames=("axis", "rows"))
def _concat_replicas(stacked: jax.Array, axis: int, rows: int | None) -> jax.Array:
    moved = jnp.moveaxis(stacked, 0, axis)
    merged = moved.reshape(moved.shape[:axis] + (-1,) + moved.shape[axis + 2 :])
    return merged if rows is None else lax.slice_in_dim(merged, 0, rows, axis=axis)
