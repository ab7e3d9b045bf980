"""'pmap', 'sharded', 'shard_map': one program over a mesh of the replicas' devices.

The program comes from the strategy record's builder. On equal chunks it runs every replica. On
an uneven batch (uneven='exact', the default) it runs the full chunks on the first k-1 devices,
and the short last chunk runs as its own compiled call on its device, through the same jitted
per-replica call as 'explicit' (so its numbers are explicit's): no padding row enters a
computation. With uneven='pad' the last chunk is padded instead, and what padding would visibly
change is refused (see padding.py).
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from dp_jax._devices import require_distinct
from dp_jax.parallel_apply import parallel_apply
from dp_jax.strategies.cache import ReplicaCache
from dp_jax.strategies.call import ReplicaFn, StrategyCall, StrategyResult, reduce_collections, replica_keys
from dp_jax.strategies.explicit import run as run_explicit
from dp_jax.strategies.explicit import with_rngs_first
from dp_jax.strategies.inputs import SplitArgs, cut_for, place_arrays, place_tail, split_args
from dp_jax.strategies.mesh import mesh_of
from dp_jax.strategies.padding import check_outputs_grow, check_padding_allowed, check_ragged_collectives
from dp_jax.strategies.plan import ReplicaPlacement, ShardPlan, per_device_views, plan_shards
from dp_jax.strategies.table import Strategy
from dp_jax.strategies.unpad import merge_replica_outputs


class MappedVariables(NamedTuple):
    """The variables as a mapped strategy holds them: P()-replicated over the program's devices, and
    a committed copy on the short last chunk's device (None when every replica is in the program)."""

    program: Any
    own_call: Any = None


def place_variables(record: Strategy, variables: Any, plan: ShardPlan, cache: ReplicaCache,
                    axis_name: str) -> MappedVariables:
    """`variables` placed for `plan`'s replicas; sent once while `cache` holds them (one entry per layout)."""
    program_devices = plan.devices[: plan.mapped_replicas]
    tail_device = None if plan.tail_replica is None else plan.devices[plan.tail_replica]
    sharding = NamedSharding(mesh_of(program_devices, axis_name), P())

    def place(v: Any) -> MappedVariables:
        own_call = None if tail_device is None else jax.device_put(v, tail_device)
        return MappedVariables(jax.device_put(v, sharding), own_call)
    return cache.get(variables, ("P()", program_devices, tail_device, axis_name), place)


def run(record: Strategy, call: StrategyCall) -> StrategyResult:
    """Run the record's program on the full (or padded) chunks and a short last chunk on its own; gather."""
    who = f"data_parallel(strategy={record.name!r})"
    split, plan = _plan(record, call, who)
    if not plan.batch_size:  # no array inputs, or 0 rows: nothing to map; one behaviour for every strategy
        return run_explicit(record, call)
    _refuse(call, split, plan, who)
    head, tail = cut_for(split, plan)
    placed, arrays = _place(record, call, head, plan)
    keys = replica_keys(call.rngs, len(plan.devices))
    stacked_out, stacked_collections = _run_program(record, call, split, plan, placed.program, arrays, keys)
    tail_out = tail_collections = None
    if tail is not None:
        tail_out, tail_collections = _run_own_call(call, tail, plan, placed.own_call, keys)
    output = merge_replica_outputs(stacked_out, plan, call.output_device, call.dim, who, tail_out)
    if call.sync_collections and tail_collections is not None:
        stacked_collections = _append_replica(stacked_collections, tail_collections, plan.devices[0])
    collections = reduce_collections(stacked_collections, call.sync_collections, plan.devices[0])
    return StrategyResult(output, collections, plan)


def place(record: Strategy, call: StrategyCall) -> ReplicaPlacement:
    """Per-device views of the very arrays `run` passes its program, then the short chunk's own arrays."""
    split, plan = _plan(record, call, f"placed(strategy={record.name!r})")
    head, tail = cut_for(split, plan)
    placed, arrays = _place(record, call, head, plan)
    program_devices = plan.devices[: plan.mapped_replicas]
    variables = per_device_views(placed.program, program_devices)
    inputs = [split.rebuild(views) for views in per_device_views(arrays, program_devices)]
    if tail is not None:
        variables.append(placed.own_call)
        inputs.append(split.rebuild(place_tail(tail, plan)))
    return ReplicaPlacement(variables, inputs, plan)


def _plan(record: Strategy, call: StrategyCall, who: str) -> tuple[SplitArgs, ShardPlan]:
    require_distinct(call.devices, "device_ids")
    split, batch = split_args(call.args, call.kwargs, call.dim, who)
    return split, plan_shards(batch, call.devices, record.name, call.uneven)


def _refuse(call: StrategyCall, split: SplitArgs, plan: ShardPlan, who: str) -> None:
    n = len(call.devices)
    check_ragged_collectives(plan, call.axis_name, who, n)
    if call.uneven == "pad_unchecked":  # padding on purpose, to measure what it changes (the harness)
        return
    check_padding_allowed(plan, who, updates_collections=call.updates_collections, axis_name=call.axis_name,
                          uses_rngs=bool(call.rngs), n_devices=n)
    check_outputs_grow(call.replica_fn, call.variables, split, plan, call.dim, who, n)


def _place(record: Strategy, call: StrategyCall, split: SplitArgs, plan: ShardPlan) -> tuple[MappedVariables, list]:
    """(placed variables, the program's input arrays: cut or padded, sharded over the program's mesh)."""
    mesh = mesh_of(plan.devices[: plan.mapped_replicas], call.mesh_axis)
    placed = place_variables(record, call.variables, plan, call.cache, call.mesh_axis)
    return placed, place_arrays(split, plan, mesh, call.mesh_axis, stacked=record.layout == "stacked")


def _run_program(record: Strategy, call: StrategyCall, split: SplitArgs, plan: ShardPlan, variables: Any,
                 arrays: list, keys: dict | None) -> tuple[Any, Any]:
    """The one mapped program over replicas 0..mapped_replicas-1: stacked (outputs, collections)."""
    devices = plan.devices[: plan.mapped_replicas]
    if keys is not None:
        sharding = NamedSharding(mesh_of(devices, call.mesh_axis), P(call.mesh_axis))
        keys = jax.device_put(jax.tree.map(lambda k: k[: len(devices)], keys), sharding)
    program = _program(record, call.replica_fn, split.treedef, split.static, tuple(split.axes), devices,
                       call.mesh_axis)
    return program(variables, arrays, keys)


def _run_own_call(call: StrategyCall, tail: SplitArgs, plan: ShardPlan, variables: Any,
                  keys: dict | None) -> tuple[Any, Any]:
    """The short last chunk through explicit's per-replica jitted call, on its device: (output, collections)."""
    i, device = plan.tail_replica, plan.devices[plan.tail_replica]
    key = None if keys is None else jax.device_put(jax.tree.map(lambda k: k[i], keys), device)
    args, kwargs = tail.rebuild(place_tail(tail, plan))
    (result,) = parallel_apply(with_rngs_first(call.replica_fn), [variables], [(key, *args)], [kwargs], [device])
    return result


def _append_replica(stacked: Any, last: Any, device: jax.Device) -> Any:
    """(k-1, ...) stacked collections and replica k-1's own, as one (k, ...) stack on `device`."""
    return jax.tree.map(lambda s, x: jnp.concatenate(jax.device_put([s, x[None]], device)), stacked, last)


@functools.lru_cache(maxsize=256)
def _program(record: Strategy, replica_fn: ReplicaFn, treedef: Any, static: tuple, axes: tuple[int, ...],
             devices: tuple[jax.Device, ...], name: str) -> Callable:
    """The compiled-once callable (variables, arrays, keys) -> stacked (outputs, collections)."""
    split = SplitArgs(treedef, static, [], [])

    def replica(variables, arrays, rngs):
        args, kwargs = split.rebuild(arrays)
        return replica_fn(variables, rngs, args, kwargs)

    return record.build(replica, axes, devices, name)
