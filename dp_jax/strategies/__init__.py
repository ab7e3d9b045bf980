"""The four ways dp_jax runs one replica per device, all with torch's chunking and replica-0 state.

- 'explicit': the four pipeline steps (scatter, replicate, parallel_apply, gather); one jitted call
  per device, unequal chunks allowed, devices may repeat.
- 'pmap': `jax.pmap` over the replicas (in JAX >= 0.8 a jit of shard_map).
- 'sharded': `jax.jit` of `jax.vmap` over a (replica, row) reshaped batch sharded with NamedSharding;
  vmap keeps each replica's computation (BatchNorm statistics, dropout) its own.
- 'shard_map': `jax.jit(jax.shard_map(..., check_vma=False))`, the per-device view.
Every strategy computes on exactly torch's chunks: on an uneven batch the mapped three run one
program in which each device computes its own chunk, the short last one on its rows alone
(`switch`; see ShardPlan). With uneven='pad' they pad the last chunk instead, as a pmap port
does, and refuse what that visibly changes.

Layout: `table` (one `Strategy` record per name, the mapped programs' builders), `plan`
(ShardPlan: who runs which rows, and how), `inputs` (split, lay out and place the batch), `switch`
(the program of an uneven batch), `traced` (a mapped strategy inside jax.jit), `padding`
(what uneven='pad' refuses), `unpad` (gather the mapped outputs), `cache` (placed variables),
`explicit` and `mapped` (the two ways to run).
"""
from __future__ import annotations

import re
from typing import Any

from dp_jax.strategies import explicit, mapped
from dp_jax.strategies.cache import ReplicaCache
from dp_jax.strategies.call import StrategyCall, StrategyResult, reduce_collections, replica_keys
from dp_jax.strategies.mesh import REPLICA_AXIS
from dp_jax.strategies.plan import UNEVEN_MODES, ReplicaPlacement, ShardPlan, check_uneven, plan_shards
from dp_jax.strategies.table import MAPPED_STRATEGIES, STRATEGIES, Strategy, lookup

_RUNNERS = {False: explicit, True: mapped}  # by Strategy.mapped: one call per replica, or one program


def run_strategy(strategy: Strategy | str, call: StrategyCall) -> StrategyResult:
    """Run `call.replica_fn` on torch-sized chunks of (call.args, call.kwargs), one replica per device.

    Replica i gets rngs `fold_in(key, i)`. Collections are replica 0's, or (sync_collections) the
    mean over replicas of floating leaves. Compiles once per (shapes, devices); transfers the
    chunks, the variables (unless cached) and the outputs (to output_device).
    """
    record = _record(strategy, call)
    try:
        return _RUNNERS[record.mapped].run(record, call)
    except NameError as error:
        raise _unbound_axis(error, record, call) from error


def _unbound_axis(error: NameError, record: Strategy, call: StrategyCall) -> NameError:
    """JAX's "unbound axis name: batch" (a BatchNorm(axis_name='batch') or lax.pmean in the model) with the fix."""
    found = re.search(r"unbound axis name: ([^\s.]+)", str(error))
    if found is None:
        return error
    name = found.group(1)
    if not record.mapped:
        fix = (f"'{record.name}' runs each replica apart, so no collective spans them: use strategy='shard_map' "
               f"(or 'pmap', 'sharded') with axis_name={name!r}, or a model without axis_name")
    else:
        fix = f"pass DataParallel(..., strategy={record.name!r}, axis_name={name!r}) so the replica axis has that name"
        if call.axis_name is not None:
            fix += f" (it is called {call.axis_name!r} now)"
    return NameError(f"data_parallel(strategy={record.name!r}): the model uses a collective over axis {name!r} "
                     f"(e.g. BatchNorm(axis_name={name!r}) or lax.pmean(x, {name!r})), which is not bound; {fix}")


def place_call(strategy: Strategy | str, call: StrategyCall) -> ReplicaPlacement:
    """Place the variables and inputs of `call` as `run_strategy` would, and report them per replica.

    Transfers like a call (variables through `call.cache`, so a later run reuses them); runs no model.
    """
    record = _record(strategy, call)
    return _RUNNERS[record.mapped].place(record, call)


def place_variables(strategy: Strategy | str, variables: Any, plan: ShardPlan, cache: ReplicaCache,
                    axis_name: str = REPLICA_AXIS) -> Any:
    """The variables as `strategy` uses them for `plan`'s replicas, sent once while `cache` holds them.

    'explicit': dp_jax.replicate's list of per-device copies; mapped strategies: one array per leaf
    replicated with a P() NamedSharding over the program's devices.
    """
    record = strategy if isinstance(strategy, Strategy) else lookup(strategy)
    return _RUNNERS[record.mapped].place_variables(record, variables, plan, cache, axis_name)


def _record(strategy: Strategy | str, call: StrategyCall) -> Strategy:
    """The record itself (looked up once by the caller, e.g. DataParallel), or the record of a name."""
    return strategy if isinstance(strategy, Strategy) else lookup(strategy, call.axis_name)


__all__ = [
    "MAPPED_STRATEGIES", "REPLICA_AXIS", "STRATEGIES", "UNEVEN_MODES", "ReplicaCache",
    "ReplicaPlacement", "ShardPlan", "check_uneven",
    "Strategy", "StrategyCall", "StrategyResult", "lookup", "place_call", "place_variables", "plan_shards",
    "reduce_collections", "replica_keys", "run_strategy",
]
