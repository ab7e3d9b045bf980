"""All four dp_jax strategies compute the same numbers as 'explicit' and as torch-chunked single-device JAX.

The reference here is written from torch's rules, not from dp_jax: split the batch into chunks of
ceil(B/n) rows, apply the model to each chunk on one device with rngs fold_in(key, i), concatenate,
and keep chunk 0's updated batch statistics.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers_jax import chunked_reference
from _models_jax import make

from dp_jax import MAPPED_STRATEGIES as MAPPED
from dp_jax import STRATEGIES
from dp_jax.data_parallel import DataParallel

MODES = {  # model -> modes it supports
    "mlp": ("eval", "dropout"),
    "convbn": ("eval", "train_bn"),
    "attention": ("eval", "dropout"),
    "lstm": ("eval",),
}


def call_kwargs(mode: str, seed: int) -> dict:
    if mode == "dropout":
        return {"train": True, "rngs": {"dropout": jax.random.key(100 + seed)}}
    if mode == "train_bn":
        return {"train": True, "mutable": ("batch_stats",)}
    return {"train": False}


def reference(model, variables, x, n, mode, seed):
    """(output, chunk 0's collections) from one device, chunk by chunk as torch's DataParallel computes."""
    kwargs = call_kwargs(mode, seed)
    apply = jax.jit(model.apply, static_argnames=("train", "mutable"))
    out, collections = chunked_reference(apply, variables, x, n, **kwargs)
    return np.asarray(out), collections


def run(model, variables, x, n, strategy, mode, seed):
    kwargs = call_kwargs(mode, seed)
    train = kwargs.pop("train")
    dp = DataParallel(model, device_ids=list(range(n)), strategy=strategy)
    result = dp.apply(variables, x, train, **kwargs)
    return result if "mutable" in kwargs else (result, None)


def assert_trees_equal(a, b):
    jax.tree.map(lambda u, v: np.testing.assert_array_equal(np.asarray(u), np.asarray(v)), a, b)


def check_case(name, mode, n, batch, seed=0):
    model, variables, x = make(name, batch, seed)
    results = {s: run(model, variables, x, n, s, mode, seed) for s in STRATEGIES}
    out, coll = results["explicit"]
    for strategy in MAPPED:  # bitwise: the same chunk shapes on the same devices
        np.testing.assert_array_equal(np.asarray(results[strategy][0]), np.asarray(out), err_msg=strategy)
        assert_trees_equal(results[strategy][1], coll)
    ref_out, ref_coll = reference(model, variables, x, n, mode, seed)
    np.testing.assert_allclose(np.asarray(out), ref_out, rtol=1e-6, atol=1e-6)
    jax.tree.map(lambda u, v: np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=1e-6, atol=1e-6),
                 coll, ref_coll)
    if mode == "eval":  # and, with a tolerance, the plain full-batch single-device model
        np.testing.assert_allclose(np.asarray(out), np.asarray(model.apply(variables, x, False)),
                                   rtol=1e-5, atol=1e-5)
    return results


# The default run: each model and mode once, over 1, 2, 4 and 8 devices; the full matrix is slow.
@pytest.mark.parametrize("name,mode,n", [
    ("mlp", "dropout", 4), ("mlp", "eval", 8), ("convbn", "train_bn", 4), ("convbn", "eval", 1),
    ("attention", "eval", 2), ("lstm", "eval", 2),
])
def test_every_strategy_is_bitwise_explicit(name, mode, n):
    check_case(name, mode, n=n, batch=2 * n, seed=n + len(name))


@pytest.mark.slow
@pytest.mark.parametrize("n", [1, 2, 4, 8])
@pytest.mark.parametrize("name,mode", [(m, mode) for m, modes in MODES.items() for mode in modes])
def test_full_matrix_models_modes_devices(name, mode, n):
    check_case(name, mode, n=n, batch=3 * n, seed=n)


def test_train_mode_batch_stats_are_chunk_0s_like_torch():
    model, variables, x = make("convbn", 8, seed=3)
    out, coll = run(model, variables, x, 4, "sharded", "train_bn", 3)
    _, chunk0 = model.apply(variables, jnp.asarray(x[:2]), True, mutable=["batch_stats"])
    _, full = model.apply(variables, jnp.asarray(x), True, mutable=["batch_stats"])
    jax.tree.map(lambda u, v: np.testing.assert_allclose(np.asarray(u), np.asarray(v), rtol=1e-6, atol=1e-7),
                 coll, chunk0)
    assert not np.allclose(coll["batch_stats"]["BatchNorm_0"]["mean"], full["batch_stats"]["BatchNorm_0"]["mean"])


@pytest.mark.parametrize("name", ["mlp", pytest.param("attention", marks=pytest.mark.slow)])
def test_uneven_batch_5_on_4_matches_explicit(name):
    model, variables, x = make(name, 5, seed=7)
    explicit, _ = run(model, variables, x, 4, "explicit", "eval", 7)
    for strategy in MAPPED:
        out, _ = run(model, variables, x, 4, strategy, "eval", 7)
        assert out.shape == explicit.shape == (5, *x.shape[1:-1], out.shape[-1])
        # rows of full chunks run on identical shapes: bitwise; the padded last chunk runs on 2 rows
        # instead of 1, and XLA may pick another kernel for that shape: equal to rounding.
        np.testing.assert_array_equal(np.asarray(out[:4]), np.asarray(explicit[:4]), err_msg=strategy)
        np.testing.assert_allclose(np.asarray(out[4:]), np.asarray(explicit[4:]), rtol=1e-6, atol=1e-6)


def single_device_grad(model, variables, x, target):
    return jax.grad(lambda v: jnp.sum((model.apply(v, x) - target) ** 2))(variables)


# lstm: a lax.scan carry under shard_map (check_vma); the default run keeps that case, the rest is slow.
@pytest.mark.parametrize("strategy,name,batch", [
    *[(s, "mlp", 5) for s in STRATEGIES], ("shard_map", "lstm", 8),
    *[pytest.param(s, name, batch, marks=pytest.mark.slow) for s in STRATEGIES
      for name, batch in (("mlp", 8), ("lstm", 5), ("lstm", 8)) if (s, name, batch) != ("shard_map", "lstm", 8)],
])
def test_grad_through_every_strategy_equals_single_device_grad(strategy, name, batch):
    model, variables, x = make(name, batch, seed=batch)
    home = jax.devices()[5]  # the variables live off the replica devices; grads must come back here
    variables = jax.device_put(variables, home)
    target = np.random.default_rng(batch).standard_normal((batch, 4)).astype(np.float32)
    dp = DataParallel(model, device_ids=[0, 1, 2, 3], strategy=strategy)

    def loss(v):
        return jnp.sum((dp.apply(v, x) - jax.device_put(target, jax.devices()[0])) ** 2)

    grads = jax.grad(loss)(variables)
    expected = single_device_grad(model, variables, x, target)
    # neither psum'd twice (4x) nor device-0-only: equal to the full-batch gradient
    jax.tree.map(lambda g, e: np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=1e-5, atol=1e-6),
                 grads, expected)
    assert all(g.devices() == {home} for g in jax.tree.leaves(grads))


@pytest.mark.slow  # the default run checks dropout bitwise in test_every_strategy_is_bitwise_explicit
@pytest.mark.parametrize("strategy", MAPPED)
def test_dropout_masks_equal_explicit_bitwise_with_fresh_keys(strategy):
    model, variables, x = make("mlp", 4, seed=11)
    for key_seed in (0, 1):
        rngs = {"dropout": jax.random.key(key_seed)}
        expect = DataParallel(model, [0, 1], strategy="explicit").apply(variables, x, True, rngs=rngs)
        got = DataParallel(model, [0, 1], strategy=strategy).apply(variables, x, True, rngs=rngs)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(expect))
        no_dropout = model.apply(variables, x, False)
        assert not np.allclose(np.asarray(got), np.asarray(no_dropout))


@pytest.mark.slow
@pytest.mark.parametrize("batch,n", [(3, 4), (7, 4), (10, 4), (9, 8), (13, 8)])
@pytest.mark.parametrize("name", ["mlp", "convbn"])
def test_uneven_batches_match_explicit_and_keep_torch_replicas(name, batch, n):
    model, variables, x = make(name, batch, seed=batch + n)
    explicit = DataParallel(model, list(range(n)), strategy="explicit")
    expected = explicit.apply(variables, x)
    for strategy in MAPPED:
        dp = DataParallel(model, list(range(n)), strategy=strategy)
        out = dp.apply(variables, x)
        assert dp.last_plan.chunk_sizes == explicit.last_plan.chunk_sizes
        assert dp.last_plan.devices == explicit.last_plan.devices
        np.testing.assert_allclose(np.asarray(out), np.asarray(expected), rtol=1e-6, atol=1e-6, err_msg=strategy)
