"""The JAX side's training through dp_jax's compiled step (the default for the mapped strategies).

One program per mapped strategy: `DataParallel.train_step(..., return_grads=True)` (optax, params and
optimizer state resident) runs the K steps whose parameters are compared, and its first step's
gradients and batch statistics are the ones compared too; no `value_and_grad` program is compiled
beside it (it computed the same forward and backward again: 3 of the demo's largest programs). The
output compared is the eager path's (`DataParallel.apply`, outside jit), which runs beside it, and the
harness checks the compiled step's gradients and parameters against that path. Steps are cached per
(module, devices, strategy, loss, optimizer), so a second compare of the same pair and shapes
compiles nothing.
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


def has_compiled_step(strategy: str) -> bool:
    """Whether `strategy` runs inside jit (the mapped strategies); 'explicit' trains eagerly."""
    from dp_jax import MAPPED_STRATEGIES

    return strategy in MAPPED_STRATEGIES


@dataclasses.dataclass(frozen=True)
class _StepKey:
    """What the compiled step depends on; hashable, so a warm compare reuses them."""

    flax_module: Any
    devices: tuple
    strategy: str
    dim: int
    mutable: tuple[str, ...] | bool
    loss_jax: Callable
    pair_name: str
    optimizer: str
    frozen: tuple[str, ...] = ()  # parameters torch freezes (ModelPair.frozen): no update


def train_compiled(run: RunInputs, flax_module: Any, variables: dict, devices: tuple, strategy: str, *,
                   progress: Callable[[], None]) -> Snapshot:
    """The first step's gradients and statistics and the params after config.steps compiled train steps.

    The Snapshot's `outputs` is None: the caller takes the eager path's (see the module docstring).
    """
    pair, config = run.pair, run.config
    key = _StepKey(flax_module, devices, strategy, config.dim, mutable_collections(pair), pair.loss_jax, pair.name,
                   config.optimizer, pair.frozen)
    try:
        train_step = _train_step(key)
    except TypeError:  # a module with an unhashable field: build afresh (and compile again)
        train_step = _train_step.__wrapped__(key)
    x = pair.to_flax_inputs(run.inputs)
    params = variables["params"]
    collections = {k: v for k, v in variables.items() if k != "params"}
    opt_state = optax_optimizer(config.optimizer, pair.frozen).init(params)
    trajectory = Trajectory() if config.trajectory else None
    host = jax.device_get
    for step in range(config.steps):
        params, opt_state, collections, loss, grads = train_step(params, opt_state, collections, x, run.targets)
        if step == 0:  # copied now: the next step donates the collections it is given
            first_grads, first_stats = host(grads), host(collections.get("batch_stats", {}))
        if trajectory is not None:
            trajectory.add(host(loss), host(grads), host(params))
        progress()
    return Snapshot(None, first_grads, first_stats, host(params), trajectory=trajectory)


@functools.lru_cache(maxsize=32)
def _train_step(key: _StepKey) -> Any:
    import dp_jax

    wrapper = dp_jax.DataParallel(key.flax_module, list(key.devices), dim=key.dim, strategy=key.strategy)
    forward = dp_apply(wrapper, key.mutable)
    loss_of_output = loss_with_output(key.loss_jax, forward, key.pair_name)

    def loss_with_collections(variables, x, y):
        loss, (_, updated) = loss_of_output(variables, x, y)
        return loss, updated

    tx = optax_optimizer(key.optimizer, key.frozen)
    return wrapper.train_step(tx, loss_with_collections, has_aux=True, return_grads=True)


def clear_caches() -> None:
    """Forget the compiled steps (they hold the user's modules and losses)."""
    _train_step.cache_clear()
