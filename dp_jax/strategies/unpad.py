"""Undo the mapped strategies' layout: gather the stacked outputs like torch, without padding rows.

A mapped program returns every output leaf stacked per replica, shape (n, *per_replica_shape).
Gathering it like torch means concatenating the first k replicas (those that got a chunk) along
`dim`, then dropping the rows past the batch: the short chunk's filled rows (uneven='exact', the
leaves the switch program's `Filled` marks) or the last replica's padding rows (uneven='pad').
The eager runner calls `gather_stacked` on the outputs it moved to output_device, the traced
runner inside its trace: one gather, one warning, one wording of each error.
"""
from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

from dp_jax._errors import UsageError, warn_user
from dp_jax.scatter_gather import SCALAR_GATHER_WARNING
from dp_jax.strategies.switch import Filled, merge_slots


def gather_stacked(stacked: Any, sizes: tuple[int, ...], dim: int, who: str, filled: Filled | None = None, *,
                   padded: bool = False) -> Any:
    """Concatenate replicas 0..len(sizes)-1 of every (n, ...) leaf along `dim`: torch's gather.

    Args:
      stacked: the program's outputs, each leaf (n, *per_replica_shape), n >= len(sizes).
      sizes: torch's chunk sizes; rows past sum(sizes) are dropped from the leaves that grew.
      filled: the switch program's record of the leaves whose short chunk was filled (uneven='exact').
      padded: the last chunk was padded to sizes[0] rows (uneven='pad'): every leaf grew.
    A scalar per replica becomes a vector (with torch's warning). Runs one small cached jit per leaf
    shape (inlined when called inside a trace); moves nothing: the caller places `stacked` first.
    """
    paths_and_leaves, treedef = jax.tree_util.tree_flatten_with_path(stacked)
    grown = filled.leaves if filled is not None else (padded,) * len(paths_and_leaves)
    replicas, rows = len(sizes), sum(sizes)
    merged = []
    for (path, leaf), cut in zip(paths_and_leaves, grown):
        name = "output" + jax.tree_util.keystr(path)
        per_replica = leaf.shape[1:]
        axis = dim % len(per_replica) if per_replica else 0
        if padded and (not per_replica or per_replica[axis] != sizes[0]):
            raise UsageError(  # uneven='pad' refuses this before running (check_outputs_grow); 'pad_unchecked' here
                f"{who}: {name} has shape {tuple(per_replica)} per replica, not {sizes[0]} rows along "
                f"dim={dim}, so the padding rows cannot be dropped from it; use uneven='exact' (the default)")
        if not per_replica:
            if dim != 0:
                raise UsageError(f"{who}: {name} is a scalar per replica and dim={dim}; scalars can only "
                                 "be gathered along dim=0 (into a vector with one value per replica)")
            warn_user(SCALAR_GATHER_WARNING, UserWarning)
            merged.append(leaf if leaf.shape[0] == replicas else leaf[:replicas])
            continue
        merged.append(_concat_replicas(leaf, replicas=replicas, axis=axis, rows=rows if cut else None))
    return treedef.unflatten(merged)


@functools.partial(jax.jit, static_argnames=("replicas", "axis", "rows"))
def _concat_replicas(stacked: jax.Array, replicas: int, axis: int, rows: int | None) -> jax.Array:
    """The first `replicas` entries of the leading axis laid side by side along `axis`, cut to `rows`."""
    moved = jnp.moveaxis(stacked[:replicas], 0, axis)
    return merge_slots(moved, axis, rows)
