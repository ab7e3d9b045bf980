"""Edges of dp_jax under jax.jit the other tests do not reach: a device left empty under axis_name,
one scalar per replica on a batch that idles a device, and train_step with an optimizer that reads
the params (AdamW's weight decay)."""
from __future__ import annotations

import random

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from _helpers_jax import devices
from _models_jax import make

import dp_jax
from dp_jax import MAPPED_STRATEGIES as MAPPED

N = 4
SEED = random.Random().randrange(10_000)  # fresh weights and inputs each session


@pytest.mark.parametrize("strategy", ["shard_map", "pmap", "sharded"])
def test_axis_name_under_jit_refuses_a_batch_that_leaves_a_device_empty_while_tracing(strategy):
    # 6 rows on 4 devices: torch's chunks 2, 2, 2 and an idle fourth device, all chunks equal. A collective
    # over the axis would wait for the idle device; .lower() traces without compiling or running, so a
    # missing refusal fails here at once instead of in XLA's 40 s rendezvous timeout.
    model, variables, x = make("convbn", 6, seed=SEED, axis_name="replicas_bn")
    dp = dp_jax.DataParallel(model, devices(N), strategy=strategy, axis_name="replicas_bn")
    program = jax.jit(lambda v, x: dp.apply(v, x, train=True, mutable=["batch_stats"]))
    with pytest.raises(dp_jax.UsageError, match=r"axis_name='replicas_bn'.*batch 6 on 4 devices.*chunks \(2, 2, 2\)"):
        program.lower(variables, x)


@pytest.mark.parametrize("strategy", MAPPED)
def test_one_scalar_per_replica_under_jit_has_one_value_per_replica_that_ran(strategy):
    rng = np.random.default_rng(SEED)
    w, x = rng.standard_normal(3).astype(np.float32), rng.standard_normal((5, 3)).astype(np.float32)
    dp = dp_jax.DataParallel(lambda v, x: jnp.sum(x @ v["w"]), devices(N), strategy=strategy)
    with pytest.warns(UserWarning, match="^Was asked to gather along dimension 0"):
        out = jax.jit(dp.apply)({"w": w}, x)
    per_chunk = [(x[a:b] @ w).sum() for a, b in ((0, 2), (2, 4), (4, 5))]  # torch's chunks of 5 on 4: 2, 2, 1
    assert out.shape == (3,)  # the idle fourth device contributes no value
    np.testing.assert_allclose(np.asarray(out), per_chunk, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("strategy, batch", [("shard_map", 7), ("sharded", 8)])
def test_train_step_with_adamw_decays_the_params_it_is_given(strategy, batch):
    model, variables, x = make("mlp", batch, seed=SEED)
    y = np.random.default_rng(SEED + 1).normal(size=(batch, 4)).astype(np.float32)
    tx = optax.adamw(0.01, weight_decay=0.5)  # a large decay: params that did not reach update would show
    dp = dp_jax.DataParallel(model, devices(N), strategy=strategy)
    step = dp.train_step(tx, lambda v, x, y: jnp.mean((dp.apply(v, x) - y) ** 2))
    params = variables["params"]
    state = [params, tx.init(params), {}]
    expected, expected_state = params, tx.init(params)  # one device, the whole batch (a row-wise model)
    for _ in range(3):
        *state, loss = step(*state, x, y)
        grads = jax.grad(lambda p: jnp.mean((model.apply({"params": p}, x) - y) ** 2))(expected)
        updates, expected_state = tx.update(grads, expected_state, expected)
        expected = optax.apply_updates(expected, updates)
    jax.tree.map(lambda a, e: np.testing.assert_allclose(np.asarray(a), np.asarray(e), atol=1e-5, rtol=1e-5),
                 state[0], expected)
