"""'pmap', 'sharded', 'shard_map': one program over a mesh of the replicas' devices.

On equal chunks the program is the strategy record's own (its builder). On an uneven batch
(uneven='exact', the default) it is the per-device switch program of switch.py, in which every
device computes exactly its torch chunk, the short last one included: no padding row enters a
computation, and the batch is still one compiled program and one dispatch. With uneven='pad' the
last chunk is padded instead and the record's program runs; what padding would visibly change is
refused (see padding.py).
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from dp_jax._devices import require_distinct
from dp_jax.strategies.cache import ReplicaCache
from dp_jax.strategies.call import ReplicaFn, StrategyCall, StrategyResult, reduce_collections, replica_keys
from dp_jax.strategies.explicit import run as run_explicit
from dp_jax.strategies.inputs import SplitArgs, place_arrays, split_args
from dp_jax.strategies.mesh import mesh_of
from dp_jax.strategies.padding import check_outputs_grow, check_padding_allowed, check_ragged_collectives
from dp_jax.strategies.plan import ReplicaPlacement, ShardPlan, per_device_views, plan_shards
from dp_jax.strategies.switch import short_chunk_views, switch_program
from dp_jax.strategies.table import Strategy
from dp_jax.strategies.unpad import merge_replica_outputs


def place_variables(record: Strategy, variables: Any, plan: ShardPlan, cache: ReplicaCache, axis_name: str) -> Any:
    """`variables` replicated (`P()`) over `plan`'s devices; sent once while `cache` holds them."""
    sharding = NamedSharding(mesh_of(plan.devices, axis_name), P())
    return cache.get(variables, ("P()", plan.devices, axis_name), lambda v: jax.device_put(v, sharding))


def run(record: Strategy, call: StrategyCall) -> StrategyResult:
    """Run one program over the replicas (the record's, or the switch program on an uneven batch); gather."""
    who = f"data_parallel(strategy={record.name!r})"
    split, plan = _plan(record, call, who)
    if not plan.batch_size:  # no array inputs, or 0 rows: nothing to map; one behaviour for every strategy
        return run_explicit(record, call)
    _refuse(call, split, plan, who)
    variables, arrays = _place(record, call, split, plan)
    keys = _placed_keys(call, plan)
    uneven = plan.chunk_sizes if plan.short_replica is not None else None
    program = program_for(record, call.replica_fn, split.treedef, split.static, tuple(split.axes), plan.devices,
                          call.mesh_axis, call.dim, who, uneven)
    (stacked_out, stacked_collections), filled = program(variables, arrays, keys)
    output = merge_replica_outputs(stacked_out, plan, call.output_device, call.dim, who, filled)
    collections = reduce_collections(stacked_collections, call.sync_collections, plan.devices[0])
    return StrategyResult(output, collections, plan)


def place(record: Strategy, call: StrategyCall) -> ReplicaPlacement:
    """Per-device views of the very arrays `run` passes its program (the short chunk's: its own rows)."""
    split, plan = _plan(record, call, f"placed(strategy={record.name!r})")
    variables, arrays = _place(record, call, split, plan)
    views = per_device_views(arrays, plan.devices)
    if plan.short_replica is not None:
        views[-1] = short_chunk_views(views[-1], split.axes, plan.chunk_sizes[-1], record.layout == "stacked")
    return ReplicaPlacement(per_device_views(variables, plan.devices), [split.rebuild(v) for v in views], plan)


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


def _place(record: Strategy, call: StrategyCall, split: SplitArgs, plan: ShardPlan) -> tuple[Any, list]:
    """(placed variables, the program's input arrays: laid out per replica, sharded over the plan's mesh)."""
    mesh = mesh_of(plan.devices, call.mesh_axis)
    variables = place_variables(record, call.variables, plan, call.cache, call.mesh_axis)
    return variables, place_arrays(split, plan, mesh, call.mesh_axis, stacked=record.layout == "stacked")


def _placed_keys(call: StrategyCall, plan: ShardPlan) -> dict | None:
    """Replica i's keys fold_in(key, i), one per device of the plan, sharded on the replica axis."""
    keys = replica_keys(call.rngs, len(plan.devices))
    if keys is None:
        return None
    return jax.device_put(keys, NamedSharding(mesh_of(plan.devices, call.mesh_axis), P(call.mesh_axis)))


@functools.lru_cache(maxsize=256)
def program_for(record: Strategy, replica_fn: ReplicaFn, treedef: Any, static: tuple, axes: tuple[int, ...],
                devices: tuple[jax.Device, ...], name: str, dim: int, who: str,
                uneven_sizes: tuple[int, ...] | None = None) -> Callable:
    """The compiled-once callable (variables, arrays, keys) -> ((stacked outputs, collections), Filled or None):
    the record's program on equal (or padded) chunks; given `uneven_sizes`, the switch program over them."""
    split = SplitArgs(treedef, static, [], [])

    def replica(variables, arrays, rngs):
        args, kwargs = split.rebuild(arrays)
        return replica_fn(variables, rngs, args, kwargs)

    if uneven_sizes is not None:
        stacked = record.layout == "stacked"
        return jax.jit(switch_program(replica, axes, devices, name, uneven_sizes, dim, stacked, who))
    program = record.build(replica, axes, devices, name)
    return lambda variables, arrays, keys: (program(variables, arrays, keys), None)
