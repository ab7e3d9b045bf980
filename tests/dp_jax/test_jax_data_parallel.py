"""dp_jax.DataParallel / data_parallel: the Flax-facing API (linen, plain apply functions, NNX)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers_jax import counting_compiles
from _models_jax import ScaledMLP as MLP
from _models_jax import batch, make
from flax import nnx

from dp_jax import STRATEGIES
from dp_jax.data_parallel import DataParallel, data_parallel


def linear_apply(variables, x, *, scale=1.0, mask=None):
    """A flax-free apply function: rows of x times w, optionally masked per row."""
    out = scale * (x @ variables["w"])
    return out if mask is None else out * mask[:, None]


def test_linen_module_matches_module_apply_and_lands_on_device_ids_0():
    model, variables, x = make("mlp", 6, seed=1)
    out = DataParallel(model, device_ids=[2, 3]).apply(variables, x)
    np.testing.assert_allclose(np.asarray(out), np.asarray(model.apply(variables, x)), rtol=1e-5, atol=1e-6)
    assert out.devices() == {jax.devices()[2]} and out.committed


@pytest.mark.parametrize("strategy", ["explicit", "sharded"])
def test_an_equal_linen_module_built_again_compiles_nothing(strategy):
    widths = (11, 4)  # used by no other test, so the first apply below is the one that compiles
    variables = MLP(widths).init(jax.random.key(3), jnp.ones((1, 5)))
    x = batch(seed=4, size=6)
    with counting_compiles() as first_compiles:
        first = DataParallel(MLP(widths), device_ids=[0, 1, 2], strategy=strategy).apply(variables, x)
    with counting_compiles() as second_compiles:
        second = DataParallel(MLP(widths), device_ids=[0, 1, 2], strategy=strategy).apply(variables, x)
    assert first_compiles.count > 0
    assert second_compiles.count == 0
    np.testing.assert_array_equal(np.asarray(second), np.asarray(first))


@pytest.mark.parametrize("strategy", ["explicit", "shard_map"])
def test_plain_apply_fn_gets_no_flax_kwargs_and_splits_array_kwargs(strategy):
    rng = np.random.default_rng(2)
    w, x = rng.standard_normal((3, 2)).astype(np.float32), rng.standard_normal((6, 3)).astype(np.float32)
    mask = (rng.random(6) > 0.5).astype(np.float32)
    dp = DataParallel(linear_apply, [0, 1, 2], strategy=strategy)
    out = dp.apply({"w": w}, x, scale=2.0, mask=mask)
    np.testing.assert_allclose(np.asarray(out), 2.0 * (x @ w) * mask[:, None], rtol=1e-6)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_dim_1_with_uneven_batch_splits_and_gathers_along_dim_1(strategy):
    rng = np.random.default_rng(3)
    w, x = rng.standard_normal((2, 3)).astype(np.float32), rng.standard_normal((3, 5)).astype(np.float32)
    dp = DataParallel(lambda v, x: v["w"] @ x, [0, 1, 2, 3], dim=1, strategy=strategy)
    out = dp.apply({"w": w}, x)
    np.testing.assert_allclose(np.asarray(out), w @ x, rtol=1e-6, atol=1e-6)
    assert dp.last_plan.chunk_sizes == (2, 2, 1)


@pytest.mark.parametrize("strategy", ["explicit", "sharded"])
def test_output_device_receives_the_gathered_output(strategy):
    model, variables, x = make("mlp", 4, seed=4)
    out = DataParallel(model, [0, 1], output_device=5, strategy=strategy).apply(variables, x)
    assert out.devices() == {jax.devices()[5]}


@pytest.mark.parametrize("strategy", ["explicit", "shard_map"])
def test_single_device_keeps_output_on_it_like_torch(strategy):
    model, variables, x = make("mlp", 4, seed=5)
    out = DataParallel(model, [3], output_device=1, strategy=strategy).apply(variables, x)
    assert out.devices() == {jax.devices()[3]}


def test_mutable_returns_output_and_replica_0_collections_like_flax():
    model, variables, x = make("convbn", 4, seed=6)
    out, updated = DataParallel(model, [0, 1]).apply(variables, x, True, mutable=["batch_stats"])
    _, chunk0 = model.apply(variables, x[:2], True, mutable=["batch_stats"])
    assert out.shape == (4, 3) and set(updated) == {"batch_stats"}
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7), updated, chunk0)
    assert all(leaf.devices() == {jax.devices()[0]} for leaf in jax.tree.leaves(updated))


def test_functional_data_parallel_matches_the_class_and_takes_module_kwargs():
    model, variables, x = make("mlp", 6, seed=7)
    rngs = {"dropout": jax.random.key(3)}
    functional = data_parallel(model.apply, variables, x, [0, 1, 2],
                               module_kwargs={"train": True, "rngs": rngs}, strategy="pmap")
    method = DataParallel(model, [0, 1, 2], strategy="pmap").apply(variables, x, train=True, rngs=rngs)
    np.testing.assert_array_equal(np.asarray(functional), np.asarray(method))
    assert not np.allclose(np.asarray(functional), np.asarray(model.apply(variables, x)))


def test_functional_data_parallel_unpacks_a_tuple_of_inputs():
    rng = np.random.default_rng(8)
    w, x = rng.standard_normal((3, 2)).astype(np.float32), rng.standard_normal((4, 3)).astype(np.float32)
    mask = np.ones(4, np.float32)
    out = data_parallel(lambda v, x, m: linear_apply(v, x, mask=m), {"w": w}, (x, mask), [0, 1])
    np.testing.assert_allclose(np.asarray(out), x @ w, rtol=1e-6)


def test_nnx_module_runs_through_split_and_merge():
    model = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
    graphdef, state = nnx.split(model)

    def apply_fn(state, x):
        return nnx.merge(graphdef, state)(x)

    x = np.random.default_rng(9).standard_normal((6, 3)).astype(np.float32)
    out = DataParallel(apply_fn, [0, 1, 2], strategy="sharded").apply(state, x)
    np.testing.assert_allclose(np.asarray(out), np.asarray(model(x)), rtol=1e-5, atol=1e-6)


def test_not_a_module_nor_callable_raises():
    with pytest.raises(TypeError, match=r"module_or_apply_fn=3 is neither a linen Module nor callable"):
        DataParallel(3)
