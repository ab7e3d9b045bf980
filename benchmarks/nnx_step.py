"""Section: the NNX training step (issue 33), measured in one run against two references.

- dp_jax's compiled step for an NNX module (`DataParallel(nnx_model).train_step(tx, loss_fn)`, then
  `step(x, y)`: the module split, one jitted program, the module updated in place) against a
  hand-written split/merge `jax.jit` step with the same contract: `nnx.split` the module, one
  `jax.jit` (params, optimizer state and the rest replicated `P()` and donated, batch `P('data')`),
  `nnx.update` the module. Target: <= 1.05x.
- the same NNX step against dp_jax's linen step of the same MLP (reported, no target): what NNX
  adds over linen (the split and write-back around the program).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from benchmarks.context import Context
from benchmarks.models import CLASSES, DEPTH, flax_model_and_batch
from benchmarks.results import Section
from benchmarks.timing import measure_ratio
from benchmarks.train_step import LR, STRATEGY, _targets, dp_jax_step

TARGET = 1.05


def nnx_mlp(variables: Any, width: int) -> Any:
    """The NNX twin of benchmarks.models.flax_mlp, holding the linen variables' weights."""
    from flax import nnx

    class MLP(nnx.Module):
        def __init__(self):
            rngs = nnx.Rngs(0)
            self.layers = nnx.List([nnx.Linear(width, width, rngs=rngs) for _ in range(DEPTH)])
            self.head = nnx.Linear(width, CLASSES, rngs=rngs)

        def __call__(self, x):
            for layer in self.layers:
                x = nnx.relu(layer(x))
            return self.head(x)

    model = MLP()
    params = variables["params"]
    for i, layer in enumerate([*model.layers, model.head]):
        layer.kernel[...] = np.asarray(params[f"Dense_{i}"]["kernel"])
        layer.bias[...] = np.asarray(params[f"Dense_{i}"]["bias"])
    return model


def nnx_dp_step(model: Any, x: Any, y: Any, devices: list, tx: Any) -> Any:
    """dp_jax's NNX train step as a thunk."""
    import jax
    import jax.numpy as jnp

    import dp_jax

    step = dp_jax.DataParallel(model, devices, strategy=STRATEGY).train_step(
        tx, lambda dp, x, y: jnp.mean((dp(x) - y) ** 2))
    return lambda: jax.block_until_ready(step(x, y))


def hand_written_step(model: Any, x: Any, y: Any, devices: list, tx: Any) -> Any:
    """The reference: nnx.split, jax.jit of the functional step (state P(), donated; batch P('data')), nnx.update."""
    import jax
    import jax.numpy as jnp
    import optax
    from flax import nnx
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = Mesh(np.array(devices), ("data",))
    replicated, rows = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    graphdef, params, rest = nnx.split(model, nnx.Param, ..., graph=True)

    def body(params, opt_state, rest, x, y):
        def loss_of(params):
            return jnp.mean((nnx.merge(graphdef, params, rest)(x) - y) ** 2)
        loss, grads = jax.value_and_grad(loss_of)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, rest, loss

    jitted = jax.jit(body, donate_argnums=(0, 1, 2), out_shardings=replicated)
    state = {"opt": jax.device_put(jax.tree.map(np.asarray, tx.init(params)), replicated)}
    nnx.update(model, jax.device_put(jax.tree.map(np.asarray, nnx.state(model, graph=True)), replicated))

    def step() -> None:
        _, params, rest = nnx.split(model, nnx.Param, ..., graph=True)
        params, state["opt"], rest, loss = jitted(params, state["opt"], rest, jax.device_put(x, rows),
                                                  jax.device_put(y, rows))
        nnx.update(model, params, rest)
        jax.block_until_ready(loss)
    return step


def measure(section: Section, ctx: Context) -> None:
    import optax

    tx = optax.sgd(LR, momentum=0.9)
    devices = ctx.jax_devices()[: ctx.n_devices]
    for width in ctx.strategy_widths:
        linen, variables, x = flax_model_and_batch(width, ctx.batch_size, devices[0])
        x, y = np.asarray(x), _targets(ctx.batch_size)
        labels = {"model": f"mlp{width}", "devices": len(devices)}
        try:
            ours = nnx_dp_step(nnx_mlp(variables, width), x, y, devices, tx)
            reference = hand_written_step(nnx_mlp(variables, width), x, y, devices, tx)
            _, linen_thunk = dp_jax_step(linen, variables, x, y, devices, tx)
            section.add_ratio({**labels, "vs": "hand-written nnx.split/merge jax.jit step"},
                              measure_ratio(ours, reference, ctx.settings), TARGET)
            section.add_ratio({**labels, "vs": "dp_jax linen train_step"}, measure_ratio(ours, linen_thunk,
                                                                                         ctx.settings))
        except Exception as error:
            section.add_failure(labels, error)


def run(ctx: Context) -> Section:
    section = Section(
        "nnx_train_step", "NNX training step: dp_jax's step vs a hand-written split/merge step and vs linen",
        "t(A) / t(B) for one fwd+bwd+update step of the same MLP (SGD with momentum, mean-squared loss on the "
        f"gathered output), global batch {ctx.batch_size}, strategy {STRATEGY!r}; each step leaves the NNX "
        "module updated",
    )
    measure(section, ctx)
    return section
