"""'pmap', 'sharded', 'shard_map': one program over a mesh of the replicas' devices.

On equal chunks the program is the strategy record's own (its builder). On an uneven batch
(uneven='exact', the default) it is the per-device switch program of switch.py, in which every
device computes exactly its torch chunk, the short last one included: no padding row enters a
computation, and the batch is still one compiled program and one dispatch. With uneven='pad' the
last chunk is padded instead and the record's program runs; what padding would visibly change is
refused (see padding.py).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from dp_jax._caches import module_cache
from dp_jax._devices import device_put_apart, require_distinct
from dp_jax.strategies.cache import ReplicaCache
from dp_jax.strategies.call import ReplicaFn, StrategyCall, StrategyResult, reduce_collections, replica_keys
from dp_jax.strategies.explicit import run as run_explicit
from dp_jax.strategies.inputs import SplitArgs, place_arrays, split_args
from dp_jax.strategies.mesh import mesh_of
from dp_jax.strategies.padding import check_outputs_grow, check_padding_allowed, check_ragged_collectives
from dp_jax.strategies.plan import ReplicaPlacement, ShardPlan, per_device_views, plan_shards
from dp_jax.strategies.switch import ShortChunkMismatch, short_chunk_views, switch_program
from dp_jax.strategies.table import Strategy
from dp_jax.strategies.unpad import gather_stacked


def place_variables(record: Strategy, variables: Any, plan: ShardPlan, cache: ReplicaCache, axis_name: str) -> Any:
    """`variables` replicated (`P()`) over `plan`'s devices; sent once while `cache` holds them."""
    sharding = NamedSharding(mesh_of(plan.devices, axis_name), P())
    return cache.get(variables, ("P()", plan.devices, axis_name), lambda v: device_put_apart(v, sharding))


def run(record: Strategy, call: StrategyCall) -> StrategyResult:
    """Run one program over the replicas (the record's, or the switch program on an uneven batch); gather."""
    who = f"data_parallel(strategy={record.name!r})"
    split, plan = _plan(record, call, who)
    if not plan.batch_size:  # no array inputs, or 0 rows: nothing to map; one behaviour for every strategy
        return run_explicit(record, call)
    _refuse(call, split, plan, who)
    variables, arrays = _place(record, call, split, plan)
    keys = _placed_keys(call, plan)
    key = ProgramKey.of(record, call, split, devices=plan.devices,
                        uneven_sizes=plan.chunk_sizes if plan.short_replica is not None else None)
    program = program_for(key, who)
    (stacked_out, stacked_collections), filled = program(variables, arrays, keys)
    output = gather_stacked(jax.device_put(stacked_out, call.output_device), plan.chunk_sizes, call.dim, who,
                            filled, padded=bool(plan.pad_rows))
    collections = reduce_collections(jax.device_put(stacked_collections, plan.devices[0]), len(plan.chunk_sizes),
                                     call.sync_collections)
    return StrategyResult(output, collections, plan)


def place(record: Strategy, call: StrategyCall) -> ReplicaPlacement:
    """Per-device views of the very arrays `run` passes its program (the short chunk's: its own rows)."""
    split, plan = _plan(record, call, f"placed(strategy={record.name!r})")
    variables, arrays = _place(record, call, split, plan)
    views = per_device_views(arrays, plan.devices)
    if plan.short_replica is not None:
        views[-1] = short_chunk_views(views[-1], split.axes, plan.chunk_sizes[-1], record.stacked)
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
    check_outputs_grow(call.replica_fn, call.variables, split, plan, call.dim, who=who, n_devices=n)


def _place(record: Strategy, call: StrategyCall, split: SplitArgs, plan: ShardPlan) -> tuple[Any, list]:
    """(placed variables, the program's input arrays: laid out per replica, sharded over the plan's mesh)."""
    mesh = mesh_of(plan.devices, call.mesh_axis)
    variables = place_variables(record, call.variables, plan, call.cache, call.mesh_axis)
    return variables, place_arrays(split, plan, mesh, call.mesh_axis, stacked=record.stacked)


def _placed_keys(call: StrategyCall, plan: ShardPlan) -> dict | None:
    """Replica i's keys fold_in(key, i), one per device of the plan, sharded on the replica axis."""
    keys = replica_keys(call.rngs, len(plan.devices))
    if keys is None:
        return None
    return jax.device_put(keys, NamedSharding(mesh_of(plan.devices, call.mesh_axis), P(call.mesh_axis)))


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProgramKey:
    """What one compiled program depends on: the key of `program_for`'s cache (no error label in it).

    Attributes:
      record: the strategy (None in the switch program's own key).   replica_fn: the hashable replica function.
      treedef, static, axes: (args, kwargs)'s structure, its static leaves, each array's split axis.
      devices, axis_name: the mesh the program runs on.   dim: the batch dimension.
      uneven_sizes: torch's unequal chunk sizes (the switch program), or None (the record's own).
    """

    record: Strategy | None
    replica_fn: ReplicaFn
    treedef: Any
    static: tuple
    axes: tuple[int, ...]
    devices: tuple[jax.Device, ...]
    axis_name: str
    dim: int
    uneven_sizes: tuple[int, ...] | None = None

    @classmethod
    def of(cls, record: Strategy, call: StrategyCall, split: SplitArgs, *, devices: tuple[jax.Device, ...],
           uneven_sizes: tuple[int, ...] | None) -> ProgramKey:
        """The key of `call` split as `split`, on `devices`."""
        return cls(record=record, replica_fn=call.replica_fn, treedef=split.treedef, static=split.static,
                   axes=tuple(split.axes), devices=devices, axis_name=call.mesh_axis, dim=call.dim,
                   uneven_sizes=uneven_sizes)


def program_for(key: ProgramKey, who: str) -> Callable:
    """The compiled-once callable (variables, arrays, keys) -> ((stacked outputs, collections), Filled or None):
    the record's program on equal (or padded) chunks; given `uneven_sizes`, the switch program over them.
    A short chunk that returns what a full one cannot be gathered with raises, labelled with `who`."""
    program = _program(key)

    def labelled(variables, arrays, keys):
        try:
            return program(variables, arrays, keys)
        except ShortChunkMismatch as mismatch:  # raised while tracing: the cached program has no label
            raise mismatch.labelled(who) from None
    return labelled


@module_cache(maxsize=256)
def _program(key: ProgramKey) -> Callable:
    if key.uneven_sizes is not None:
        return _switch(dataclasses.replace(key, record=None), key.record.stacked)
    program = key.record.build(_replica(key), key.axes, key.devices, key.axis_name)
    return lambda variables, arrays, keys: (program(variables, arrays, keys), None)


@module_cache(maxsize=128)
def _switch(key: ProgramKey, stacked: bool) -> Callable:
    """The jitted switch program of `key` (its `record` left out): it depends on the strategy only through the
    batch's layout, so 'pmap' and 'sharded' (stacked slots) share one program and one compile."""
    return jax.jit(switch_program(_replica(key), key.axes, key.devices, key.axis_name, sizes=key.uneven_sizes,
                                  dim=key.dim, stacked=stacked))


def _replica(key: ProgramKey) -> Callable:
    """key.replica_fn as the programs call it: (variables, arrays, rngs), with the args rebuilt from `arrays`."""
    split = SplitArgs(key.treedef, key.static, [], [])

    def replica(variables, arrays, rngs):
        args, kwargs = split.rebuild(arrays)
        return key.replica_fn(variables, rngs, args, kwargs)
    return replica
