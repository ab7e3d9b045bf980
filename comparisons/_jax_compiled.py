"""The JAX side's training through dp_jax's compiled step (the default for the mapped strategies).

`DataParallel.value_and_grad` gives the first step's output, gradients and batch statistics;
`DataParallel.train_step` (optax, params and optimizer state resident) runs the K steps whose
parameters are compared. The eager path (`jax.grad` around `apply`) still runs beside it, and the
harness checks that the two agree. Steps are cached per (module, devices, strategy, loss,
optimizer), so a second compare of the same pair and shapes compiles nothing.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax

from comparisons import _arguments as check
from comparisons._runs import RunConfig, Snapshot
from comparisons._trees import output_tree


def has_compiled_step(strategy: str) -> bool:
    """Whether `strategy` runs inside jit (the mapped strategies); 'explicit' trains eagerly."""
    from dp_jax.strategies import MAPPED_STRATEGIES

    return strategy in MAPPED_STRATEGIES


def train_compiled(pair: Any, flax_module: Any, variables: dict, x: tuple, targets: Any, devices: tuple,
                   strategy: str, config: RunConfig, mutable: Any, progress: Callable[[], None]) -> Snapshot:
    """First step's (output, grads, stats) and the params after config.steps compiled train steps."""
    from comparisons._jax_optimizer import make_optimizer

    try:
        grad_step, train_step = _steps(flax_module, devices, strategy, config.dim, mutable, pair.loss_jax,
                                       pair.name, config.optimizer)
    except TypeError:  # a module with an unhashable field: build afresh (and compile again)
        grad_step, train_step = _steps.__wrapped__(flax_module, devices, strategy, config.dim, mutable,
                                                   pair.loss_jax, pair.name, config.optimizer)
    (_, (output, updated)), grads = grad_step(variables, x, targets)
    params = variables["params"]
    collections = {k: v for k, v in variables.items() if k != "params"}
    opt_state = make_optimizer(config.optimizer).init(params)
    for _ in range(config.steps):
        params, opt_state, collections, _ = train_step(params, opt_state, collections, x, targets)
        progress()
    host = jax.device_get
    stats = updated.get("batch_stats", {})
    return Snapshot(output_tree(host(output)), host(grads["params"]), host(stats), host(params))


@functools.lru_cache(maxsize=32)
def _steps(flax_module: Any, devices: tuple, strategy: str, dim: int, mutable: Any, loss_jax: Callable,
           pair_name: str, optimizer: str) -> tuple[Any, Any]:
    import dp_jax
    from comparisons._jax_optimizer import make_optimizer

    wrapper = dp_jax.DataParallel(flax_module, list(devices), dim=dim, strategy=strategy)
    mutable_list = list(mutable) if isinstance(mutable, tuple) else mutable

    def forward(variables, x):
        result = wrapper.apply(variables, *x, train=True, mutable=mutable_list)
        return result if mutable else (result, {})

    def loss_with_output(variables, x, y):
        output, updated = forward(variables, x)
        return check.scalar_loss(pair_name, "loss_jax", loss_jax(output, y)), (output, updated)

    def loss_with_collections(variables, x, y):
        output, updated = forward(variables, x)
        return loss_jax(output, y), updated

    return (wrapper.value_and_grad(loss_with_output, has_aux=True),
            wrapper.train_step(make_optimizer(optimizer), loss_with_collections, has_aux=True))
