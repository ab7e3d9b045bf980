"""The JAX side of a comparison: dp_jax.DataParallel (one strategy) vs a single-device reference.

Gradients are `jax.grad` of the loss on the gathered output, through the strategy's transfers.
The reference applies the Flax module to the same torch-sized chunks on devices[0] in one jitted
function, keeping chunk 0's batch statistics (what torch's replica 0 keeps).
"""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

import dp_jax
from comparisons import _arguments as check
from comparisons._jax_compiled import has_compiled_step, train_compiled
from comparisons._jax_optimizer import make_optimizer
from comparisons._runs import BackendRun, RunConfig, Snapshot
from comparisons._trees import output_tree
from comparisons.placement import PlacementMap, placement_of


def run_jax(pair: Any, flax_module: Any, variables: dict, inputs: tuple[np.ndarray, ...], targets: np.ndarray,
            devices: Sequence[jax.Device], strategy: str, config: RunConfig,
            progress: Callable[[], None]) -> BackendRun:
    """Train `variables` with DataParallel(strategy) and with the chunked reference; record placement."""
    variables = jax.device_put(variables, devices[0])  # where torch keeps the original module
    x = pair.to_flax_inputs(inputs)
    mutable = ["batch_stats"] if pair.has_batch_stats else False
    wrapper = dp_jax.DataParallel(flax_module, list(devices), dim=config.dim, strategy=strategy)

    def dp_apply(vars_, x_):
        return _split(wrapper.apply(vars_, *x_, train=True, mutable=mutable), mutable)

    sizes = tuple(dp_jax.chunk_sizes(config.batch_size, len(devices)))
    reference = _reference_step(pair.loss_jax, flax_module, sizes, config.dim, _hashable(mutable), pair.name)
    dp_step = _value_and_grad(pair.loss_jax, dp_apply, pair.name)
    eager = None
    if has_compiled_step(strategy):  # the compiled step trains; the eager path is checked against it
        eager, out_and_grads = _train(dp_step, variables, x, targets, config, lambda: None)
        dp = train_compiled(pair, flax_module, variables, x, targets, tuple(devices), strategy, config,
                            _hashable(mutable), progress)
    else:
        dp, out_and_grads = _train(dp_step, variables, x, targets, config, progress)
    single, _ = _train(reference, variables, x, targets, config, progress)
    label = f"jax:{strategy}"
    placement = _placement(wrapper, variables, x, out_and_grads, devices)
    plan = wrapper.last_plan
    ran_apart = plan.pad_rows or plan.short_replica is not None  # how the uneven batch ran, replica by replica
    notes = [f"{label}: " + "; ".join(plan.describe().splitlines())] if ran_apart else []
    count = sum(leaf.size for leaf in jax.tree.leaves(variables["params"]))
    padded = len(plan.chunk_sizes) - 1 if plan.pad_rows else None
    return BackendRun(label, dp, single, placement, list(plan.chunk_sizes), count, notes, padded,
                      jax.device_get(variables.get("batch_stats")), eager=eager)


def _split(result, mutable):
    return result if mutable else (result, {})


def _chunked_apply(flax_module, sizes, dim, mutable):
    def apply(variables, x):
        offsets = np.cumsum([0, *sizes])
        outputs, collections = [], {}
        for i, (start, stop) in enumerate(zip(offsets[:-1], offsets[1:])):
            chunk = [jax.lax.slice_in_dim(a, int(start), int(stop), axis=dim) for a in x]
            output, updated = _split(flax_module.apply(variables, *chunk, train=True, mutable=mutable),
                                     mutable)
            outputs.append(output)
            collections = updated if i == 0 else collections
        return jax.tree.map(lambda *leaves: jnp.concatenate(leaves, dim), *outputs), collections
    return apply


def _hashable(mutable):
    return tuple(mutable) if isinstance(mutable, list) else mutable


def _reference_step(loss_jax, flax_module, sizes, dim, mutable, pair_name):
    """The jitted chunked reference, one per (loss, module, sizes, dim, mutable): a warm compare reuses it."""
    try:
        return _cached_reference_step(loss_jax, flax_module, sizes, dim, mutable, pair_name)
    except TypeError:  # a module with an unhashable field: build it afresh (and compile again)
        return _cached_reference_step.__wrapped__(loss_jax, flax_module, sizes, dim, mutable, pair_name)


@functools.lru_cache(maxsize=32)
def _cached_reference_step(loss_jax, flax_module, sizes, dim, mutable, pair_name):
    return jax.jit(_value_and_grad(loss_jax, _chunked_apply(flax_module, sizes, dim, mutable), pair_name))


def _value_and_grad(loss_jax, apply, pair_name):
    """(params, state, x, y) -> ((loss, (output, updated state)), grads) for a (variables, x) apply."""
    loss_of_output = _jitted(loss_jax)  # one program, not one eager dispatch per op

    def loss(params, state, x, y):
        output, updated = apply({"params": params, **state}, x)
        return check.scalar_loss(pair_name, "loss_jax", loss_of_output(output, y)), (output, updated)
    return jax.value_and_grad(loss, has_aux=True)


@functools.lru_cache(maxsize=32)
def _jitted(fn):
    return jax.jit(fn)


def _train(step_fn, variables, x, y, config, progress) -> tuple[Snapshot, tuple]:
    params = variables["params"]
    state = {k: v for k, v in variables.items() if k != "params"}
    init, update = _optimizer_step(config.optimizer)
    opt_state = init(params)
    first: dict[str, Any] = {}
    for step in range(config.steps):
        (_, (output, updated)), grads = step_fn(params, state, x, y)
        state = {**state, **updated}
        if step == 0:
            first = {"output": output, "grads": grads, "stats": state.get("batch_stats", {})}
        params, opt_state = update(grads, opt_state, params)
        progress()
    host = jax.device_get
    snapshot = Snapshot(output_tree(host(first["output"])), host(first["grads"]), host(first["stats"]), host(params))
    return snapshot, (first["output"], first["grads"])


@functools.lru_cache(maxsize=8)
def _optimizer_step(name: str):
    """(init, step) for optimizer `name`; step(grads, state, params) -> (params, state), jitted once."""
    optimizer = make_optimizer(name)

    @jax.jit
    def step(grads, state, params):
        updates, state = optimizer.update(grads, state, params)
        return optax.apply_updates(params, updates), state
    return optimizer.init, step


def _placement(wrapper, variables, x, out_and_grads, devices) -> PlacementMap:
    """Replicas and input chunks as DataParallel.placed reports them (padding included), output and grads."""
    output, grads = out_and_grads
    placed = wrapper.placed(variables, *x)
    inputs = [args for args, _ in placed.inputs_per_replica]
    return (placement_of(placed.variables_per_replica, devices, original=variables, per_replica=True)
            + placement_of(inputs, devices, role="input", name="args", per_replica=True)
            + placement_of(output, devices, role="output", name="out")
            + _as_grads(placement_of({"params": grads}, devices)))


def _as_grads(placement: PlacementMap) -> PlacementMap:
    return PlacementMap(tuple(dataclasses.replace(r, role="grad") for r in placement))
