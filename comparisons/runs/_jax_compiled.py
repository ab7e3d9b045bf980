"""The JAX side's training through dp_jax's compiled step (the default for the mapped strategies).

`DataParallel.value_and_grad` gives the first step's output, gradients and batch statistics;
`DataParallel.train_step` (optax, params and optimizer state resident) runs the K steps whose
parameters are compared. The eager path (`jax.grad` around `apply`) still runs beside it, and the
harness checks that the two agree. Steps are cached per (module, devices, strategy, loss,
optimizer), so a second compare of the same pair and shapes compiles nothing.
"""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax

from comparisons.runs._jax_apply import dp_apply, loss_with_output, mutable_collections
from comparisons.runs._optimizers import optax_optimizer
from comparisons.runs._records import RunInputs, Snapshot, Trajectory
from comparisons.runs._trees import output_tree


def has_compiled_step(strategy: str) -> bool:
    """Whether `strategy` runs inside jit (the mapped strategies); 'explicit' trains eagerly."""
    from dp_jax.strategies import MAPPED_STRATEGIES

    return strategy in MAPPED_STRATEGIES


@dataclasses.dataclass(frozen=True)
class _StepKey:
    """What the two compiled steps depend on; hashable, so a warm compare reuses them."""

    flax_module: Any
    devices: tuple
    strategy: str
    dim: int
    mutable: tuple[str, ...] | bool
    loss_jax: Callable
    pair_name: str
    optimizer: str


def train_compiled(run: RunInputs, flax_module: Any, variables: dict, devices: tuple, strategy: str, *,
                   progress: Callable[[], None]) -> Snapshot:
    """First step's (output, grads, stats) and the params after config.steps compiled train steps."""
    pair, config = run.pair, run.config
    key = _StepKey(flax_module, devices, strategy, config.dim, mutable_collections(pair), pair.loss_jax, pair.name,
                   config.optimizer)
    try:
        grad_step, train_step = _steps(key)
    except TypeError:  # a module with an unhashable field: build afresh (and compile again)
        grad_step, train_step = _steps.__wrapped__(key)
    x = pair.to_flax_inputs(run.inputs)
    (_, (output, updated)), grads = grad_step(variables, x, run.targets)
    params = variables["params"]
    collections = {k: v for k, v in variables.items() if k != "params"}
    opt_state = optax_optimizer(config.optimizer).init(params)
    trajectory = Trajectory() if config.trajectory else None
    host = jax.device_get
    for _ in range(config.steps):
        if trajectory is not None:  # the step's gradients: train_step returns the loss alone
            (loss, _), step_grads = grad_step({"params": params, **collections}, x, run.targets)
        params, opt_state, collections, _ = train_step(params, opt_state, collections, x, run.targets)
        if trajectory is not None:
            trajectory.add(host(loss), host(step_grads["params"]), host(params))
        progress()
    stats = updated.get("batch_stats", {})
    return Snapshot(output_tree(host(output)), host(grads["params"]), host(stats), host(params),
                    trajectory=trajectory)


@functools.lru_cache(maxsize=32)
def _steps(key: _StepKey) -> tuple[Any, Any]:
    import dp_jax

    wrapper = dp_jax.DataParallel(key.flax_module, list(key.devices), dim=key.dim, strategy=key.strategy)
    forward = dp_apply(wrapper, key.mutable)

    def loss_with_collections(variables, x, y):
        output, updated = forward(variables, x)
        return key.loss_jax(output, y), updated

    return (wrapper.value_and_grad(loss_with_output(key.loss_jax, forward, key.pair_name), has_aux=True),
            wrapper.train_step(optax_optimizer(key.optimizer), loss_with_collections, has_aux=True))


def clear_caches() -> None:
    """Forget the compiled steps (they hold the user's modules and losses)."""
    _steps.cache_clear()
