"""The four ways dp_jax runs one replica per device, all with torch's chunking and replica-0 state.

- 'explicit': the four pipeline steps (scatter, replicate, parallel_apply, gather); one jitted call
  per device, unequal chunks allowed, devices may repeat.
- 'pmap': `jax.pmap` over the replicas (in JAX >= 0.8 a jit of shard_map).
- 'sharded': `jax.jit` of `jax.vmap` over a (replica, row) reshaped batch sharded with NamedSharding;
  vmap keeps each replica's computation (BatchNorm statistics, dropout) its own.
- 'shard_map': `jax.jit(jax.shard_map(..., check_vma=False))`, the per-device view.
The mapped three pad the last chunk (see ShardPlan) and refuse what padding would change.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from dp_jax._devices import require_distinct
from dp_jax._strategy_cache import ReplicaCache
from dp_jax._strategy_inputs import SplitArgs, batch_size_of, place_arrays, spec_at, split_args
from dp_jax._strategy_plan import STRATEGIES, ReplicaPlacement, ShardPlan, per_device_views, plan_shards
from dp_jax._strategy_unpad import check_padding_allowed, merge_replica_outputs
from dp_jax.parallel_apply import parallel_apply
from dp_jax.replicate import replicate
from dp_jax.scatter_gather import gather, scatter_kwargs

# fn(variables, rngs, args, kwargs) -> (output, updated collections); must be hashable (it keys the jit cache).
ReplicaFn = Callable[[Any, "dict | None", tuple, dict], tuple[Any, Any]]
REPLICA_AXIS = "replicas"


class StrategyResult(NamedTuple):
    """What a strategy returns: the gathered output, the chosen collections, and the plan it ran."""

    output: Any
    collections: Any
    plan: ShardPlan


def run_strategy(
    strategy: str, replica_fn: ReplicaFn, variables: Any, args: tuple, kwargs: dict, *,
    devices: tuple[jax.Device, ...], output_device: jax.Device, dim: int = 0, rngs: dict | None = None,
    cache: ReplicaCache | None = None, updates_collections: bool = False, sync_collections: bool = False,
    axis_name: str | None = None,
) -> StrategyResult:
    """Run `replica_fn` on torch-sized chunks of (args, kwargs), one replica per device.

    Replica i gets rngs `fold_in(key, i)`. Collections are replica 0's, or (sync_collections) the
    mean over replicas of floating leaves. Compiles once per (shapes, devices); transfers the
    chunks, the variables (unless cached) and the outputs (to output_device).
    """
    check_strategy(strategy, axis_name)
    if len(devices) == 1:  # torch's one-device shortcut: the output stays on device_ids[0]
        output_device = devices[0]
    cache = cache if cache is not None else ReplicaCache(maxsize=0)
    run = _run_explicit if strategy == "explicit" else _run_mapped
    return run(strategy, replica_fn, variables, args, kwargs, devices, output_device, dim, rngs, cache,
               updates_collections, sync_collections, axis_name)


def check_strategy(strategy: str, axis_name: str | None = None) -> None:
    """Raise for an unknown strategy, or an axis_name that the strategy cannot bind."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy={strategy!r} is unknown; pass one of {', '.join(map(repr, STRATEGIES))}")
    if strategy == "explicit" and axis_name is not None:
        raise ValueError(
            f"axis_name={axis_name!r} needs one program over all replicas, but strategy='explicit' runs "
            "each replica as its own call; use strategy='pmap', 'sharded' or 'shard_map'"
        )


def place_variables(strategy: str, variables: Any, devices: tuple[jax.Device, ...], cache: ReplicaCache,
                    axis_name: str = REPLICA_AXIS) -> Any:
    """The variables as `strategy` uses them on `devices`, sent once while `cache` holds them.

    'explicit': dp_jax.replicate's list of per-device copies; mapped strategies: one array per
    leaf replicated with a P() NamedSharding over the mesh of `devices`.
    """
    if strategy == "explicit":
        return cache.get(variables, ("explicit", devices), lambda v: replicate(v, list(devices)))
    sharding = NamedSharding(_mesh(devices, axis_name), P())
    return cache.get(variables, ("P()", devices, axis_name), lambda v: jax.device_put(v, sharding))


def place_call(strategy: str, variables: Any, args: tuple, kwargs: dict, *, devices: tuple[jax.Device, ...],
               dim: int, cache: ReplicaCache, axis_name: str | None = None) -> ReplicaPlacement:
    """Place `variables` and (args, kwargs) as `run_strategy` would, and report them per replica.

    Transfers like a call (variables through `cache`, so a later run reuses them); runs no model.
    """
    check_strategy(strategy, axis_name)
    who = f"placed(strategy={strategy!r})"
    if strategy == "explicit":
        plan, replicas, inputs, kwargs_tup = _place_explicit(strategy, variables, args, kwargs, devices, dim, cache,
                                                             who)
        return ReplicaPlacement(list(replicas), list(zip(inputs, kwargs_tup)), plan)
    split, plan = _plan_mapped(strategy, args, kwargs, devices, dim, who)
    _, placed_variables, arrays = _place_mapped(strategy, variables, split, plan, cache, axis_name or REPLICA_AXIS)
    inputs = [split.rebuild(views) for views in per_device_views(arrays, plan.devices)]
    return ReplicaPlacement(per_device_views(placed_variables, plan.devices), inputs, plan)


def replica_keys(rngs: dict | None, replicas: int) -> dict | None:
    """{name: keys} with keys[i] = jax.random.fold_in(rngs[name], i): one stream per replica."""
    if not rngs:
        return None
    fold = jax.vmap(jax.random.fold_in, in_axes=(None, 0))
    return {name: fold(key, jnp.arange(replicas)) for name, key in rngs.items()}


def reduce_collections(stacked: Any, sync: bool, device: jax.Device) -> Any:
    """Replica 0's collections from a (replica, ...) stacked pytree, or their mean when `sync`."""
    def pick(leaf):
        leaf = jax.device_put(leaf, device)
        if sync and jnp.issubdtype(leaf.dtype, jnp.inexact):
            return jnp.mean(leaf, axis=0).astype(leaf.dtype)
        return leaf[0]
    return jax.tree.map(pick, stacked)


# --- 'explicit': the four pipeline steps --------------------------------------------------------


def _run_explicit(strategy, replica_fn, variables, args, kwargs, devices, output_device, dim, rngs, cache,
                  updates_collections, sync_collections, axis_name) -> StrategyResult:
    plan, replicas, inputs, kwargs_tup = _place_explicit(strategy, variables, args, kwargs, devices, dim, cache,
                                                         "data_parallel(strategy='explicit')")
    used = plan.devices
    keys = replica_keys(rngs, len(used))
    per_replica_keys = [None if keys is None else jax.device_put(jax.tree.map(lambda k: k[i], keys), d)
                        for i, d in enumerate(used)]
    results = parallel_apply(_with_rngs_first(replica_fn), replicas,
                             [(k, *inp) for k, inp in zip(per_replica_keys, inputs)], kwargs_tup, list(used))
    outputs = [out for out, _ in results]
    output = outputs[0] if len(devices) == 1 else gather(outputs, output_device, dim)  # 1 device: not gathered
    collections = [c for _, c in results]
    if sync_collections and len(collections) > 1:
        stacked = jax.tree.map(lambda *leaves: jnp.stack(jax.device_put(leaves, used[0])), *collections)
        return StrategyResult(output, reduce_collections(stacked, True, used[0]), plan)
    return StrategyResult(output, collections[0], plan)


def _place_explicit(strategy, variables, args, kwargs, devices, dim, cache,
                    who) -> tuple[ShardPlan, list, tuple, tuple]:
    """(plan, per-device variables, per-replica args, per-replica kwargs): replicate and scatter_kwargs."""
    plan = plan_shards(batch_size_of(args, kwargs, dim, who), devices, strategy)
    inputs, kwargs_tup = scatter_kwargs(args, kwargs, devices, dim)
    inputs, kwargs_tup = inputs or ((),), kwargs_tup or ({},)  # torch: no inputs -> one replica
    return plan, place_variables(strategy, variables, plan.devices, cache), inputs, kwargs_tup


@functools.lru_cache(maxsize=256)
def _with_rngs_first(replica_fn: ReplicaFn) -> Callable:
    """replica_fn as parallel_apply calls it: fn(variables, rngs, *args, **kwargs); one object per fn."""
    def apply(variables, rngs, *args, **kwargs):
        return replica_fn(variables, rngs, args, kwargs)
    return apply


# --- 'pmap', 'sharded', 'shard_map': one program over a mesh --------------------------------------


def _run_mapped(strategy, replica_fn, variables, args, kwargs, devices, output_device, dim, rngs, cache,
                updates_collections, sync_collections, axis_name) -> StrategyResult:
    who = f"data_parallel(strategy={strategy!r})"
    split, plan = _plan_mapped(strategy, args, kwargs, devices, dim, who)
    check_padding_allowed(plan, who, updates_collections=updates_collections, axis_name=axis_name,
                          uses_rngs=bool(rngs), n_devices=len(devices))
    name = axis_name or REPLICA_AXIS
    mesh, placed_variables, arrays = _place_mapped(strategy, variables, split, plan, cache, name)
    keys = replica_keys(rngs, len(plan.devices))
    keys = None if keys is None else jax.device_put(keys, NamedSharding(mesh, P(name)))
    program = _mapped_program(strategy, replica_fn, split.treedef, split.static, tuple(split.axes),
                              plan.devices, name)
    stacked_out, stacked_collections = program(placed_variables, arrays, keys)
    output = merge_replica_outputs(stacked_out, plan, output_device, dim, who, len(devices))
    collections = reduce_collections(stacked_collections, sync_collections, plan.devices[0])
    return StrategyResult(output, collections, plan)


def _plan_mapped(strategy, args, kwargs, devices, dim, who) -> tuple[SplitArgs, ShardPlan]:
    require_distinct(devices, "device_ids")
    split, batch = split_args(args, kwargs, dim, who)
    return split, plan_shards(batch, devices, strategy)


def _place_mapped(strategy, variables, split, plan, cache, name) -> tuple[Mesh, Any, list]:
    """(mesh, P()-replicated variables, padded input arrays sharded over the mesh)."""
    mesh = _mesh(plan.devices, name)
    placed_variables = place_variables(strategy, variables, plan.devices, cache, name)
    return mesh, placed_variables, place_arrays(split, plan, mesh, name, stacked=strategy != "shard_map")


@functools.lru_cache(maxsize=64)
def _mesh(devices: tuple[jax.Device, ...], name: str) -> Mesh:
    return Mesh(np.array(devices), (name,), axis_types=(AxisType.Auto,))


@functools.lru_cache(maxsize=256)
def _mapped_program(strategy, replica_fn, treedef, static, axes, devices, name) -> Callable:
    """The compiled-once callable (variables, arrays, keys) -> stacked (outputs, collections)."""
    split = SplitArgs(treedef, static, [], [])

    def replica(variables, arrays, rngs):
        args, kwargs = split.rebuild(arrays)
        return replica_fn(variables, rngs, args, kwargs)

    in_axes = (None, list(axes), 0)
    if strategy == "pmap":
        return jax.pmap(replica, axis_name=name, in_axes=in_axes, out_axes=0, devices=list(devices))
    mesh = _mesh(devices, name)
    if strategy == "sharded":
        batched = jax.vmap(replica, in_axes=in_axes, out_axes=0, axis_name=name)
        return jax.jit(batched, out_shardings=NamedSharding(mesh, P(name)))

    def one_block(variables, arrays, rngs):  # shard_map keeps the size-1 replica axis of rngs and outputs
        rngs = jax.tree.map(lambda k: k[0], rngs)
        return jax.tree.map(lambda leaf: leaf[None], replica(variables, arrays, rngs))

    in_specs = (P(), [spec_at(a, name) for a in axes], P(name))
    # check_vma=False, as jax.pmap's own shard_map: a model written for one device need not type its
    # values as varying (a Flax LSTM's zero carry meets varying inputs in lax.scan). Transpose then
    # psums the cotangent of the P() variables over the replicas: the full-batch gradient.
    return jax.jit(jax.shard_map(one_block, mesh=mesh, in_specs=in_specs, out_specs=P(name), check_vma=False))
