"""The JAX side of a comparison: dp_jax.DataParallel (one strategy) vs a single-device reference.

Gradients are `jax.grad` of the loss on the gathered output, through the strategy's transfers.
The reference applies the Flax module to the same torch-sized chunks on devices[0] in one jitted
function, keeping chunk 0's batch statistics (what torch's replica 0 keeps). The mapped strategies
train through dp_jax's compiled step (`_jax_compiled`), with the eager path beside it (whose output is the
one compared: the compiled step returns none); every DP run, the padded one included, differentiates the
same `dp_apply`.
"""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import optax

import dp_jax
from comparisons.placement import PlacementMap, placement_of
from comparisons.runs._jax_apply import dp_apply, mutable_collections, reference_step, value_and_grad
from comparisons.runs._jax_compiled import has_compiled_step, train_compiled
from comparisons.runs._optimizers import optax_optimizer
from comparisons.runs._records import BackendRun, RunInputs, Snapshot, Trajectory
from comparisons.runs._trees import output_tree


def run_jax(run: RunInputs, flax_module: Any, variables: dict, devices: Sequence[jax.Device], strategy: str, *,
            progress: Callable[[], None], single: Snapshot | None = None) -> BackendRun:
    """Train `variables` with DataParallel(strategy) and with the chunked reference; record placement.

    `single`: the reference's Snapshot from another strategy's run of the same inputs, devices and module
    (the reference does not depend on the strategy): reused, so it is trained once per comparison.
    """
    pair, config = run.pair, run.config
    variables = jax.device_put(variables, devices[0])  # where torch keeps the original module
    x = pair.to_flax_inputs(run.inputs)
    mutable = mutable_collections(pair)
    wrapper = dp_jax.DataParallel(flax_module, list(devices), dim=config.dim, strategy=strategy)
    sizes = tuple(dp_jax.chunk_sizes(config.batch_size, len(devices)))
    dp_step = value_and_grad(pair.loss_jax, dp_apply(wrapper, mutable), pair.name)
    eager = None
    if has_compiled_step(strategy):  # the compiled step trains; the eager path is checked against it
        eager, out_and_grads = _train(dp_step, variables, x, run, lambda: None)
        compiled = train_compiled(run, flax_module, variables, tuple(devices), strategy, progress=progress)
        dp = dataclasses.replace(compiled, outputs=eager.outputs)  # train_step returns no output: apply's
    else:
        dp, out_and_grads = _train(dp_step, variables, x, run, progress, record=config.trajectory)
    if single is None:
        reference = reference_step(pair.loss_jax, flax_module, sizes, config.dim, mutable, pair.name)
        single, _ = _train(reference, variables, x, run, progress)
    else:
        for _ in range(config.steps):
            progress()
    label = f"jax:{strategy}"
    placement = _placement(wrapper, variables, x, out_and_grads, devices)
    plan = wrapper.last_plan
    ran_apart = plan.pad_rows or plan.short_replica is not None  # how the uneven batch ran, replica by replica
    notes = [f"{label}: " + "; ".join(plan.describe().splitlines())] if ran_apart else []
    count = sum(leaf.size for leaf in jax.tree.leaves(variables["params"]))
    padded = len(plan.chunk_sizes) - 1 if plan.pad_rows else None
    return BackendRun(label, dp, single, placement, list(plan.chunk_sizes), count, notes, padded,
                      jax.device_get(variables.get("batch_stats")), eager=eager)


def run_jax_reference(run: RunInputs, flax_module: Any, variables: dict, device: jax.Device, chunks: int
                      ) -> Snapshot:
    """The chunked single-device reference alone, on `device` (the float64 check's JAX side). A module with
    a `dtype` field (Hugging Face's Flax models compute in float32 by default) is cloned to compute in
    the run's dtype. Compiles the reference once more, for that dtype."""
    pair, config = run.pair, run.config
    module = pair.jax_side.computing_in(flax_module, config.dtype)
    sizes = tuple(dp_jax.chunk_sizes(config.batch_size, chunks))
    reference = reference_step(pair.loss_jax, module, sizes, config.dim, mutable_collections(pair), pair.name)
    snapshot, _ = _train(reference, jax.device_put(variables, device), pair.to_flax_inputs(run.inputs), run,
                         lambda: None, record=config.trajectory)
    return snapshot


def run_padded(run: RunInputs, flax_module: Any, variables: dict, devices: Sequence[jax.Device], strategy: str,
               ) -> tuple[Snapshot, int]:
    """The Snapshot of DataParallel(strategy, uneven='pad_unchecked') trained eagerly as `run_jax` trains, and
    the number of parameters: what a pmap port that pads the last chunk computes."""
    pair, config = run.pair, run.config
    variables = jax.device_put(variables, devices[0])
    wrapper = dp_jax.DataParallel(flax_module, list(devices), dim=config.dim, strategy=strategy,
                                  uneven="pad_unchecked")
    step = value_and_grad(pair.loss_jax, dp_apply(wrapper, mutable_collections(pair)), pair.name)
    snapshot, _ = _train(step, variables, pair.to_flax_inputs(run.inputs), run, lambda: None)
    return snapshot, sum(leaf.size for leaf in jax.tree.leaves(variables["params"]))


def _train(step_fn, variables, x, run: RunInputs, progress, *, record: bool = False) -> tuple[Snapshot, tuple]:
    params = variables["params"]
    state = {k: v for k, v in variables.items() if k != "params"}
    init, update = _optimizer_step(run.config.optimizer, run.pair.frozen)
    opt_state = init(params)
    first: dict[str, Any] = {}
    trajectory = Trajectory() if record else None
    host = jax.device_get
    for step in range(run.config.steps):
        (loss, (output, updated)), grads = step_fn(params, state, x, run.targets)
        state = {**state, **updated}
        if step == 0:
            first = {"output": output, "grads": grads, "stats": state.get("batch_stats", {})}
        params, opt_state = update(grads, opt_state, params)
        if trajectory is not None:
            trajectory.add(host(loss), host(grads), host(params))
        progress()
    snapshot = Snapshot(output_tree(host(first["output"])), host(first["grads"]), host(first["stats"]), host(params),
                        trajectory=trajectory)
    return snapshot, (first["output"], first["grads"])


@functools.lru_cache(maxsize=8)
def _optimizer_step(name: str, frozen: tuple[str, ...] = ()):
    """(init, step) for optimizer `name` (`frozen` leaves kept); step(grads, state, params) -> (params, state),
    jitted once."""
    optimizer = optax_optimizer(name, frozen)

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


def clear_caches() -> None:
    """Forget the jitted optimizer steps and the cached programs of the other JAX runs."""
    from comparisons.runs import _jax_apply, _jax_compiled

    _optimizer_step.cache_clear()
    _jax_apply.clear_caches()
    _jax_compiled.clear_caches()


