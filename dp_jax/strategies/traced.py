"""A mapped strategy inside a trace (jax.jit, jax.grad under jit): placement by shardings, not device_puts.

Under a jit trace there are no buffers to commit: the variables are constrained to `P()` (replicated)
on the mesh of `device_ids`, the batch to torch's chunks on the replica axis, and the output to
`P()` (a full copy on every device of the mesh, output_device included: the closest a single
program comes to torch's "gathered on output_device"; `jax.device_put(out, device)` after the jit
commits it to one device).

Chunks are torch's, and no padding row enters a computation. An even batch (`B == n*c`) runs
through the strategy's own program builder. Any other batch runs as one `shard_map` over the mesh
in which device i computes its own chunk: a full chunk, the short last chunk (its rows alone), or
nothing (batch 5 on 4 devices leaves device 3 idle) — selected per device by `lax.switch` on the
replica index. The batch is laid out in slots of c rows per device; the short chunk's empty slots
are zeros that no branch reads. Outputs are gathered without them.
"""
from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from dp_jax._devices import require_distinct
from dp_jax.scatter_gather import SCALAR_GATHER_WARNING, chunk_sizes
from dp_jax.strategies.call import ReplicaFn, StrategyCall, replica_keys
from dp_jax.strategies.inputs import SplitArgs, split_args
from dp_jax.strategies.mesh import mesh_of, spec_at
from dp_jax.strategies.table import MAPPED_STRATEGIES, Strategy

FULL, SHORT, IDLE = 0, 1, 2  # what device i computes: a full chunk, the short last chunk, nothing


def is_traced(*trees: Any) -> bool:
    """True when a leaf is an abstract tracer (a jit trace), not a concrete or eagerly differentiated array."""
    from jax._src import core  # is_concrete has no public spelling; eager jax.grad tracers are concrete

    return any(isinstance(leaf, jax.core.Tracer) and not core.is_concrete(leaf)
               for tree in trees for leaf in jax.tree.leaves(tree))


def refuse_explicit(strategy: str) -> None:
    """'explicit' commits every chunk to its device with device_put, which a jit trace cannot do."""
    raise ValueError(
        f"DataParallel(strategy={strategy!r}).apply was called inside jax.jit: 'explicit' commits each chunk "
        f"and replica to its device, one call per device, which a traced program cannot do. Use a mapped "
        f"strategy ({', '.join(map(repr, MAPPED_STRATEGIES))}), which places by shardings under jit, or "
        "call apply outside jit (eager jax.grad works with every strategy)")


def run(record: Strategy, call: StrategyCall) -> tuple[Any, Any]:
    """(output replicated on the mesh, collections) of `call` inside a trace; see the module docstring."""
    who = f"data_parallel(strategy={record.name!r}) under jit"
    if not record.mapped:
        refuse_explicit(record.name)
    if call.uneven != "exact":
        raise ValueError(f"{who}: uneven={call.uneven!r} runs eagerly only; under jit every batch is exact "
                         "(pass uneven='exact', the default)")
    require_distinct(call.devices, "device_ids")
    split, batch = split_args(call.args, call.kwargs, call.dim, who)
    if batch is None:  # no array to split: torch runs one replica, on device_ids[0]
        output, collections = call.replica_fn(call.variables, call.rngs, call.args, call.kwargs)
        return output, collections
    n, name = len(call.devices), call.mesh_axis
    sizes = tuple(chunk_sizes(batch, n))
    if call.axis_name is not None and len(set(sizes)) * len(sizes) != n:
        raise ValueError(
            f"{who}: axis_name={call.axis_name!r} binds collectives over every replica, but batch {batch} on {n} "
            f"devices splits into chunks {sizes}; a collective cannot span unequal or missing chunks. Use a batch "
            f"divisible by {n}, or drop axis_name")
    mesh = mesh_of(call.devices, name)
    variables = lax.with_sharding_constraint(call.variables, NamedSharding(mesh, P()))
    keys = replica_keys(call.rngs, n)
    if keys is not None:
        keys = lax.with_sharding_constraint(keys, NamedSharding(mesh, P(name)))
    even = len(sizes) == n and sizes[0] * n == batch
    arrays = [_layout(x, axis, n, sizes[0], record.layout if even else "stacked") for x, axis in
              zip(split.arrays, split.axes)]
    arrays = [lax.with_sharding_constraint(x, NamedSharding(mesh, spec_at(axis, name)))
              for x, axis in zip(arrays, split.axes)]
    program = _program(record if even else None, call.replica_fn, split.treedef, split.static, tuple(split.axes),
                       call.devices, name, sizes, call.dim)
    stacked_out, stacked_collections = program(variables, arrays, keys)
    output = gather_stacked(stacked_out, sizes, call.dim, who)
    output = lax.with_sharding_constraint(output, NamedSharding(mesh, P()))
    return output, _collections(stacked_collections, len(sizes), call.sync_collections)


def _layout(x: Any, axis: int, n: int, c: int, layout: str) -> Any:
    """`x` as the program takes it: as is ('rows'), or n slots of c rows at `axis` ('stacked';
    zeros fill the slots past the batch, which no replica reads)."""
    if layout == "rows":
        return x
    missing = n * c - x.shape[axis]
    if missing:
        widths = [(0, 0)] * x.ndim
        widths[axis] = (0, missing)
        x = jnp.pad(x, widths)
    return x.reshape(x.shape[:axis] + (n, c) + x.shape[axis + 1:])


def _collections(stacked: Any, replicas: int, sync: bool) -> Any:
    """Replica 0's collections, or (sync) the mean of floating leaves over the replicas that ran."""
    def pick(leaf):
        if sync and jnp.issubdtype(leaf.dtype, jnp.inexact):
            return jnp.mean(leaf[:replicas], axis=0).astype(leaf.dtype)
        return leaf[0]
    return jax.tree.map(pick, stacked)


def gather_stacked(stacked: Any, sizes: tuple[int, ...], dim: int, who: str) -> Any:
    """Concatenate replicas 0..k-1 of every (n, ...) leaf along `dim`, dropping the short chunk's
    empty rows: torch's gather, in a trace. A scalar per replica becomes a vector (with torch's warning)."""
    k, c = len(sizes), sizes[0]

    def gather(path, leaf):
        per_replica = leaf.shape[1:]
        if not per_replica:
            if dim != 0:
                raise ValueError(f"{who}: output{jax.tree_util.keystr(path)} is a scalar per replica and "
                                 f"dim={dim}; scalars can only be gathered along dim=0")
            warnings.warn(SCALAR_GATHER_WARNING, UserWarning, stacklevel=5)
            return leaf[:k]
        axis = dim % len(per_replica)
        moved = jnp.moveaxis(leaf[:k], 0, axis)
        merged = moved.reshape(moved.shape[:axis] + (-1,) + moved.shape[axis + 2:])
        if sizes[-1] == c or per_replica[axis] != c:  # nothing to drop: equal chunks, or not per row
            return merged
        return lax.slice_in_dim(merged, 0, sum(sizes), axis=axis)
    return jax.tree_util.tree_map_with_path(gather, stacked)


@functools.lru_cache(maxsize=256)
def _program(record: Strategy | None, replica_fn: ReplicaFn, treedef: Any, static: tuple, axes: tuple[int, ...],
             devices: tuple[jax.Device, ...], name: str, sizes: tuple[int, ...], dim: int) -> Callable:
    """(variables, arrays, keys) -> stacked (outputs, collections): the record's program for an even
    batch (record given), else the per-device switch over FULL / SHORT / IDLE chunks."""
    split = SplitArgs(treedef, static, [], [])

    def replica(variables, arrays, rngs):
        args, kwargs = split.rebuild(arrays)
        return replica_fn(variables, rngs, args, kwargs)

    if record is not None:
        return record.build(replica, axes, devices, name)
    n = len(devices)
    kinds = np.array([FULL if s == sizes[0] else SHORT for s in sizes] + [IDLE] * (n - len(sizes)), np.int32)
    one_block = _switch_block(replica, axes, sizes, dim, kinds, name)
    in_specs = (P(), [spec_at(a, name) for a in axes], P(name))
    return jax.shard_map(one_block, mesh=mesh_of(devices, name), in_specs=in_specs, out_specs=P(name),
                         check_vma=False)


def _switch_block(replica: Callable, axes: tuple[int, ...], sizes: tuple[int, ...], dim: int, kinds: np.ndarray,
                  name: str) -> Callable:
    """One device's block: its slot of c rows, computed as a full chunk, the short chunk's rows alone, or not at all."""
    c, short = sizes[0], sizes[-1]

    def one_block(variables, arrays, rngs):
        rngs = None if rngs is None else jax.tree.map(lambda k: k[0], rngs)
        arrays = [jnp.squeeze(x, axis) for x, axis in zip(arrays, axes)]
        full_shapes = jax.eval_shape(replica, variables, arrays, rngs)

        def full(variables, arrays, rngs):
            return replica(variables, arrays, rngs)

        def short_chunk(variables, arrays, rngs):
            rows = [lax.slice_in_dim(x, 0, short, axis=axis) for x, axis in zip(arrays, axes)]
            out, collections = replica(variables, rows, rngs)
            return _fill_like(out, full_shapes[0], dim, c, short), collections

        def idle(variables, arrays, rngs):
            return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), full_shapes)

        branches = [full, short_chunk, idle]
        present = sorted(set(kinds.tolist()))
        if present == [FULL]:
            result = full(variables, arrays, rngs)
        else:
            index = jnp.asarray(kinds)[lax.axis_index(name)]
            result = lax.switch(index, branches, variables, arrays, rngs)
        return jax.tree.map(lambda leaf: leaf[None], result)
    return one_block


def _fill_like(out: Any, like: Any, dim: int, c: int, short: int) -> Any:
    """The short chunk's outputs grown to a full chunk's shapes with zero rows after its own along `dim`
    (slots for the stacked result; gather_stacked drops them). Raises for a shape that differs elsewhere."""
    def fill(path, leaf, spec):
        if leaf.shape == spec.shape:
            return leaf
        axis = dim % leaf.ndim if leaf.ndim else None
        grows = (axis is not None and leaf.ndim == len(spec.shape) and leaf.shape[axis] == short
                 and spec.shape[axis] == c
                 and all(a == b for i, (a, b) in enumerate(zip(leaf.shape, spec.shape)) if i != axis))
        if not grows:
            raise ValueError(
                f"output{jax.tree_util.keystr(path)} has shape {tuple(leaf.shape)} for the short chunk ({short} rows) "
                f"but {tuple(spec.shape)} for a full chunk ({c} rows); shapes must match in every dimension "
                f"except dim={dim} (the one gathered)")
        widths = [(0, 0)] * leaf.ndim
        widths[axis] = (0, c - short)
        return jnp.pad(leaf, widths)
    return jax.tree_util.tree_map_with_path(fill, out, like)
