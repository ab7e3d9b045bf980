"""CompiledStep.compiles() counts the programs its own calls compiled (jax.monitoring's backend compiles)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from _helpers_jax import counting_compiles, devices

import dp_jax


def _mean_square(variables, x):
    return jnp.tanh(x @ variables["w"])


@pytest.mark.parametrize("batch", [8, 7])  # equal chunks; 2, 2, 2, 1 in slots
def test_compiles_counts_this_step_s_compiles_and_nothing_else(batch):
    dp = dp_jax.DataParallel(_mean_square, devices(4), strategy="shard_map")
    step = dp.value_and_grad(lambda v, x: jnp.mean(dp.apply(v, x) ** 2))
    rng = np.random.default_rng(batch)
    variables = {"w": rng.standard_normal((3, 5)).astype(np.float32)}
    x = rng.standard_normal((batch, 3)).astype(np.float32)
    assert step.compiles() == 0
    with counting_compiles() as first:
        jax.block_until_ready(step(variables, x))
    with counting_compiles() as again:
        jax.block_until_ready(step(variables, x + 1))
    jax.jit(lambda a: a * 2)(x).block_until_ready()  # another program compiles: not this step's
    assert (step.compiles(), first.count, again.count) == (1, 1, 0)
    jax.block_until_ready(step(variables, x[:-1]))  # a new batch shape: one more program
    assert step.compiles() == 2


def test_a_train_step_and_a_value_and_grad_step_count_apart():
    dp = dp_jax.DataParallel(_mean_square, devices(2), strategy="pmap")
    loss = lambda v, x: jnp.mean(dp.apply(v, x) ** 2)  # noqa: E731
    params, x = {"w": np.ones((3, 5), np.float32)}, np.ones((4, 3), np.float32)
    tx = optax.sgd(0.1)
    train, grads = dp.train_step(tx, lambda v, x: loss(v["params"] if "params" in v else v, x)), dp.value_and_grad(loss)
    train(params, tx.init(params), {}, x)
    assert (train.compiles(), grads.compiles()) == (1, 0)
    grads(params, x)
    assert (train.compiles(), grads.compiles()) == (1, 1)
