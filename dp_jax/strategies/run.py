"""Run a call, or only place its variables and inputs, by the strategy's kind: `explicit` (one jitted call per
device) or `mapped` (one program over a mesh); the entry points DataParallel and the package export."""
from __future__ import annotations

import re
from typing import Any

from dp_jax.strategies import explicit, mapped
from dp_jax.strategies.cache import ReplicaCache
from dp_jax.strategies.call import StrategyCall, StrategyResult
from dp_jax.strategies.mesh import REPLICA_AXIS
from dp_jax.strategies.plan import ReplicaPlacement, ShardPlan
from dp_jax.strategies.table import Strategy, lookup

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
