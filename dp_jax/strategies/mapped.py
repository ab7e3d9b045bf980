"""'pmap', 'sharded', 'shard_map': one program over a mesh of the replicas' devices.

The program comes from the strategy record's builder; this module places the variables
(P()-replicated) and the inputs (padded, laid out as the record says, sharded over the mesh),
runs the program, and gathers its stacked per-replica outputs like torch.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from dp_jax._devices import require_distinct
from dp_jax.strategies.cache import ReplicaCache
from dp_jax.strategies.call import ReplicaFn, StrategyCall, StrategyResult, reduce_collections, replica_keys
from dp_jax.strategies.inputs import SplitArgs, place_arrays, split_args
from dp_jax.strategies.mesh import mesh_of
from dp_jax.strategies.plan import ReplicaPlacement, ShardPlan, per_device_views, plan_shards
from dp_jax.strategies.table import Strategy
from dp_jax.strategies.unpad import check_padding_allowed, merge_replica_outputs


def place_variables(record: Strategy, variables: Any, devices: tuple[jax.Device, ...], cache: ReplicaCache,
                    axis_name: str) -> Any:
    """One array per leaf of `variables`, replicated (P()) over the mesh of `devices`; sent once while cached."""
    sharding = NamedSharding(mesh_of(devices, axis_name), P())
    return cache.get(variables, ("P()", devices, axis_name), lambda v: jax.device_put(v, sharding))


def run(record: Strategy, call: StrategyCall) -> StrategyResult:
    """Run the record's program on the padded, sharded chunks; gather without the padding rows."""
    who = f"data_parallel(strategy={record.name!r})"
    split, plan = _plan(record, call, who)
    check_padding_allowed(plan, who, updates_collections=call.updates_collections, axis_name=call.axis_name,
                          uses_rngs=bool(call.rngs), n_devices=len(call.devices))
    mesh, placed_variables, arrays = _place(record, call, split, plan)
    keys = replica_keys(call.rngs, len(plan.devices))
    keys = None if keys is None else jax.device_put(keys, NamedSharding(mesh, P(call.mesh_axis)))
    program = _program(record, call.replica_fn, split.treedef, split.static, tuple(split.axes), plan.devices,
                       call.mesh_axis)
    stacked_out, stacked_collections = program(placed_variables, arrays, keys)
    output = merge_replica_outputs(stacked_out, plan, call.output_device, call.dim, who, len(call.devices))
    collections = reduce_collections(stacked_collections, call.sync_collections, plan.devices[0])
    return StrategyResult(output, collections, plan)


def place(record: Strategy, call: StrategyCall) -> ReplicaPlacement:
    """Per-device views of the very arrays `run` passes its program (no copy beyond the placing)."""
    split, plan = _plan(record, call, f"placed(strategy={record.name!r})")
    _, placed_variables, arrays = _place(record, call, split, plan)
    inputs = [split.rebuild(views) for views in per_device_views(arrays, plan.devices)]
    return ReplicaPlacement(per_device_views(placed_variables, plan.devices), inputs, plan)


def _plan(record: Strategy, call: StrategyCall, who: str) -> tuple[SplitArgs, ShardPlan]:
    require_distinct(call.devices, "device_ids")
    split, batch = split_args(call.args, call.kwargs, call.dim, who)
    return split, plan_shards(batch, call.devices, record.name)


def _place(record: Strategy, call: StrategyCall, split: SplitArgs, plan: ShardPlan) -> tuple[Mesh, Any, list]:
    """(mesh, P()-replicated variables, padded input arrays sharded over the mesh)."""
    mesh = mesh_of(plan.devices, call.mesh_axis)
    placed_variables = place_variables(record, call.variables, plan.devices, call.cache, call.mesh_axis)
    return mesh, placed_variables, place_arrays(split, plan, mesh, call.mesh_axis,
                                                stacked=record.layout == "stacked")


@functools.lru_cache(maxsize=256)
def _program(record: Strategy, replica_fn: ReplicaFn, treedef: Any, static: tuple, axes: tuple[int, ...],
             devices: tuple[jax.Device, ...], name: str) -> Callable:
    """The compiled-once callable (variables, arrays, keys) -> stacked (outputs, collections)."""
    split = SplitArgs(treedef, static, [], [])

    def replica(variables, arrays, rngs):
        args, kwargs = split.rebuild(arrays)
        return replica_fn(variables, rngs, args, kwargs)

    return record.build(replica, axes, devices, name)
