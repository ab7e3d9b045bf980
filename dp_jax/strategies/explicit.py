"""'explicit': the four pipeline steps (scatter, replicate, parallel_apply, gather), one jitted call per device."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from dp_jax._caches import module_cache
from dp_jax.parallel_apply import parallel_apply
from dp_jax.replicate import replicate
from dp_jax.scatter_gather import gather, scatter_kwargs
from dp_jax.strategies.cache import ReplicaCache
from dp_jax.strategies.call import ReplicaFn, StrategyCall, StrategyResult, reduce_collections, replica_keys
from dp_jax.strategies.inputs import split_args
from dp_jax.strategies.plan import ReplicaPlacement, ShardPlan, plan_shards
from dp_jax.strategies.table import Strategy


def place_variables(record: Strategy, variables: Any, plan: ShardPlan, cache: ReplicaCache,
                    axis_name: str) -> list[Any]:
    """dp_jax.replicate's per-device copies of `variables` for `plan`'s replicas, sent once while cached."""
    return cache.get(variables, (record.name, plan.devices), lambda v: replicate(v, list(plan.devices)))


def run(record: Strategy, call: StrategyCall) -> StrategyResult:
    """Scatter, replicate, apply per device (replica i with rngs fold_in(key, i)), gather."""
    plan, replicas, inputs, kwargs_tup = _place(record, call, f"data_parallel(strategy={record.name!r})")
    used = plan.devices
    keys = replica_keys(call.rngs, len(used))
    per_replica_keys = [None if keys is None else jax.device_put(jax.tree.map(lambda k, i=i: k[i], keys), d)
                        for i, d in enumerate(used)]
    results = parallel_apply(with_rngs_first(call.replica_fn), replicas,
                             [(k, *inp) for k, inp in zip(per_replica_keys, inputs)], kwargs_tup, list(used))
    outputs = [out for out, _ in results]
    output = outputs[0] if len(call.devices) == 1 else gather(outputs, call.output_device, call.dim)
    collections = [c for _, c in results]
    if call.sync_collections and len(collections) > 1:
        stacked = jax.tree.map(lambda *leaves: jnp.stack(jax.device_put(leaves, used[0])), *collections)
        return StrategyResult(output, reduce_collections(stacked, len(collections), sync=True), plan)
    return StrategyResult(output, collections[0], plan)


def place(record: Strategy, call: StrategyCall) -> ReplicaPlacement:
    """replicate's and scatter_kwargs' results, replica by replica, as `run` would place them."""
    plan, replicas, inputs, kwargs_tup = _place(record, call, f"placed(strategy={record.name!r})")
    return ReplicaPlacement(list(replicas), list(zip(inputs, kwargs_tup)), plan)


def _place(record: Strategy, call: StrategyCall, who: str) -> tuple[ShardPlan, list, tuple, tuple]:
    """(plan, per-device variables, per-replica args, per-replica kwargs): replicate and scatter_kwargs."""
    # split_args checks every leaf with the user's labels (args[1], not parallel_apply's args[2] behind the key)
    plan = plan_shards(split_args(call.args, call.kwargs, call.dim, who)[1], call.devices, record.name)
    inputs, kwargs_tup = scatter_kwargs(call.args, call.kwargs, call.devices, call.dim)
    inputs, kwargs_tup = inputs or ((),), kwargs_tup or ({},)  # torch: no inputs -> one replica
    # torch's scatter_kwargs sends non-array kwargs to every device, which gives replicas with no
    # rows (batch 5 on 4: a 4th replica with no positional args); run only the replicas that got a chunk
    inputs, kwargs_tup = inputs[: len(plan.devices)], kwargs_tup[: len(plan.devices)]
    variables = place_variables(record, call.variables, plan, call.cache, call.mesh_axis)
    return plan, variables, inputs, kwargs_tup


@module_cache(maxsize=256)
def with_rngs_first(replica_fn: ReplicaFn) -> Callable:
    """replica_fn as parallel_apply calls it: fn(variables, rngs, *args, **kwargs); one object per fn.

    A mapped strategy's short last chunk runs through it too, so its numbers are explicit's."""
    def apply(variables, rngs, *args, **kwargs):
        return replica_fn(variables, rngs, args, kwargs)
    return apply
