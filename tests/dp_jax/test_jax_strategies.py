"""dp_jax strategies: shard plans, argument refusals, per-replica keys, the variables cache, compile counts.

uneven batches (exactness, the padding mode and its refusals) are in test_jax_uneven.py."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _chunks import torch_chunk_sizes
from _helpers_jax import counting_compiles
from _models_jax import make
from hypothesis import given, settings
from hypothesis import strategies as st

from dp_jax import MAPPED_STRATEGIES as MAPPED
from dp_jax.data_parallel import DataParallel
from dp_jax.strategies import STRATEGIES, plan_shards, replica_keys

# --- ShardPlan ---------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_batch_of_5_on_4_devices_uses_3_replicas_each_on_its_own_rows(strategy):
    devices = tuple(jax.devices()[:4])
    plan = plan_shards(5, devices, strategy)
    assert plan.chunk_sizes == (2, 2, 1)
    assert plan.devices == devices[:3]
    assert [list(plan.rows(i)) for i in range(3)] == [[0, 1], [2, 3], [4]]
    assert plan.padded_size == 5 and plan.pad_rows == 0
    assert "padding" not in plan.describe()


@pytest.mark.parametrize("strategy", MAPPED)
def test_plan_says_the_short_chunk_computes_its_rows_alone_in_the_one_program(strategy):
    plan = plan_shards(11, tuple(jax.devices()[:4]), strategy)
    assert plan.short_replica == 3 and plan.mapped_replicas == 4
    assert plan.describe().splitlines() == [
        "replica 0 on cpu:0: rows 0..2 (one program over replicas 0..3)",
        "replica 1 on cpu:1: rows 3..5 (one program over replicas 0..3)",
        "replica 2 on cpu:2: rows 6..8 (one program over replicas 0..3)",
        "replica 3 on cpu:3: rows 9..10 (one program over replicas 0..3, short chunk: its rows alone)",
    ]


def test_explicit_plan_runs_every_replica_as_its_own_call():
    plan = plan_shards(11, tuple(jax.devices()[:4]), "explicit")
    assert plan.short_replica is None and plan.mapped_replicas == 0
    assert plan.describe().splitlines()[3] == "replica 3 on cpu:3: rows 9..10 (own call)"


@pytest.mark.parametrize("strategy", MAPPED)
def test_pad_mode_plan_pads_the_last_chunk_and_says_so(strategy):
    plan = plan_shards(5, tuple(jax.devices()[:4]), strategy, uneven="pad")
    assert plan.padded_size == 6 and plan.pad_rows == 1 and plan.short_replica is None
    assert (plan.describe().splitlines()[-1]
            == "replica 2 on cpu:2: rows 4..4 (one program over replicas 0..2, +1 padding row)")


@settings(max_examples=60, deadline=None)
@given(batch=st.integers(1, 200), n=st.integers(1, 8), strategy=st.sampled_from(STRATEGIES),
       uneven=st.sampled_from(["exact", "pad"]))
def test_plan_keeps_torch_chunks_and_pads_only_the_last_only_when_asked(batch, n, strategy, uneven):
    if uneven == "pad" and strategy == "explicit":
        return
    plan = plan_shards(batch, tuple(jax.devices()[:n]), strategy, uneven)
    chunk = torch_chunk_sizes(batch, n)[0]
    assert list(plan.chunk_sizes) == torch_chunk_sizes(batch, n)
    assert len(plan.devices) == len(plan.chunk_sizes)
    short = plan.chunk_sizes[-1] < chunk
    expected_pad = chunk - plan.chunk_sizes[-1] if uneven == "pad" else 0
    assert plan.pad_rows == expected_pad and plan.padded_size == batch + expected_pad
    assert plan.mapped_replicas == (0 if strategy == "explicit" else len(plan.devices))
    assert plan.short_replica == (len(plan.devices) - 1 if short and uneven == "exact" and strategy != "explicit"
                                  else None)


def test_dataparallel_reports_the_plan_it_ran():
    model, variables, x = make("mlp", 5, seed=1)
    dp = DataParallel(model, [0, 1, 2, 3], strategy="pmap")
    dp.apply(variables, x)
    assert dp.last_plan == dp.plan(5)
    assert dp.last_plan.short_replica == 2 and dp.last_plan.devices == tuple(jax.devices()[:3])


# --- refusals ----------------------------------------------------------------------------------


def test_unknown_strategy_names_value_and_choices():
    model, _, _ = make("mlp", 4)
    with pytest.raises(ValueError, match=r"strategy='pjit' is unknown; pass one of 'explicit', 'pmap'"):
        DataParallel(model, strategy="pjit")


def test_unknown_uneven_mode_names_value_and_choices():
    with pytest.raises(ValueError, match=r"uneven='trim' is unknown; pass 'exact' \(the default.*'pad' \(.*"
                                         r"or 'pad_unchecked'"):
        DataParallel(lambda v, x: x, strategy="pmap", uneven="trim")


def test_pad_mode_with_explicit_raises_naming_the_fix():
    with pytest.raises(ValueError, match=r"uneven='pad' needs a strategy that maps.*strategy='explicit'.*"
                                         r"pass uneven='exact' or strategy='pmap'"):
        DataParallel(lambda v, x: x, strategy="explicit", uneven="pad")


def test_explicit_runs_uneven_bn_training_with_chunk_0_stats():
    model, variables, x = make("convbn", 5, seed=2)
    out, stats = DataParallel(model, [0, 1, 2, 3]).apply(variables, x, True, mutable=["batch_stats"])
    _, chunk0 = model.apply(variables, x[:2], True, mutable=["batch_stats"])
    assert out.shape == (5, 3)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7), stats, chunk0)


@pytest.mark.parametrize("strategy", MAPPED)
def test_mapped_strategy_refuses_a_repeated_device(strategy):
    model, variables, x = make("mlp", 4)
    with pytest.raises(ValueError, match=r"device_ids\[1\]=cpu:0 repeats device_ids\[0\].*strategy='explicit'"):
        DataParallel(model, [0, 0], strategy=strategy).apply(variables, x)


def test_no_devices_raises():
    model, _, _ = make("mlp", 4)
    with pytest.raises(ValueError, match=r"device_ids is empty; pass at least one device"):
        DataParallel(model, device_ids=[])


def test_device_index_out_of_range_raises():
    model, _, _ = make("mlp", 4)
    with pytest.raises(ValueError, match=r"device_ids\[1\]=99 is out of range: jax.devices\(\) has 8 devices"):
        DataParallel(model, device_ids=[0, 99])


def test_axis_name_with_explicit_raises():
    model, _, _ = make("convbn", 4)
    with pytest.raises(ValueError, match=r"axis_name='batch'.*strategy='explicit'.*use strategy='pmap'"):
        DataParallel(model, strategy="explicit", axis_name="batch")


def test_rngs_must_be_a_dict():
    model, variables, x = make("mlp", 4)
    with pytest.raises(TypeError, match=r"rngs must be a dict of PRNG keys.*not a"):
        DataParallel(model).apply(variables, x, True, rngs=jax.random.key(0))


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_user_arrays_are_neither_donated_nor_modified(strategy):
    model, variables, x = make("convbn", 4, seed=5)
    x_dev, variables = jnp.asarray(x), jax.device_put(variables, jax.devices()[0])
    before = jax.tree.map(np.array, (x_dev, variables))
    DataParallel(model, [0, 1], strategy=strategy).apply(variables, x_dev, True, mutable=["batch_stats"])
    assert not any(leaf.is_deleted() for leaf in jax.tree.leaves((x_dev, variables)))
    jax.tree.map(np.testing.assert_array_equal, jax.tree.map(np.asarray, (x_dev, variables)), before)


# --- per-replica rngs and collections ------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 7])
def test_replica_i_gets_fold_in_of_key_and_i(seed):
    key = jax.random.key(seed)
    keys = replica_keys({"dropout": key}, 3)["dropout"]
    for i in range(3):
        np.testing.assert_array_equal(jax.random.key_data(keys[i]), jax.random.key_data(jax.random.fold_in(key, i)))


@pytest.mark.parametrize("strategy", ["explicit", "sharded"])
def test_sync_collections_returns_mean_of_replicas_stats(strategy):
    model, variables, x = make("convbn", 8, seed=6)
    dp = DataParallel(model, [0, 1, 2, 3], strategy=strategy, sync_collections=True)
    _, synced = dp.apply(variables, x, True, mutable=["batch_stats"])
    per_chunk = [model.apply(variables, x[2 * i : 2 * i + 2], True, mutable=["batch_stats"])[1] for i in range(4)]
    expected = jax.tree.map(lambda *leaves: np.mean(np.stack(leaves), axis=0), *per_chunk)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), synced, expected)


@pytest.mark.parametrize("strategy", MAPPED)
def test_axis_name_gives_full_batch_sync_batchnorm(strategy):
    model, variables, x = make("convbn", 8, seed=7, axis_name="batch")
    dp = DataParallel(model, [0, 1, 2, 3], strategy=strategy, axis_name="batch")
    out, stats = dp.apply(variables, x, True, mutable=["batch_stats"])
    plain, _, _ = make("convbn", 8, seed=7)
    full_out, full_stats = plain.apply(variables, x, True, mutable=["batch_stats"])
    np.testing.assert_allclose(np.asarray(out), np.asarray(full_out), rtol=1e-4, atol=1e-5)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6), stats, full_stats)


# --- the variables cache and compile counts ------------------------------------------------------


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_second_call_with_same_variables_sends_no_parameters(strategy):
    model, variables, x = make("mlp", 8, seed=8)
    variables = jax.device_put(variables, jax.devices()[0])
    dp = DataParallel(model, [0, 1, 2, 3], strategy=strategy)
    first = dp.apply(variables, x)
    second = dp.apply(variables, x)
    assert (dp.cache.misses, dp.cache.hits) == (1, 1)
    np.testing.assert_array_equal(np.asarray(first), np.asarray(second))
    # the lookup the second call made moves nothing between devices ...
    with jax.transfer_guard_device_to_device("disallow_explicit"):
        dp.place(variables, 8)
        # ... while new variables (same values, new arrays) would be sent, and the guard catches it
        fresh = jax.tree.map(lambda a: a + 0, variables)
        with pytest.raises(jax.errors.JaxRuntimeError, match="Disallowed device-to-device transfer"):
            dp.place(fresh, 8)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_cache_keys_the_devices_batch_8_then_5_on_4_devices(strategy):
    # 4 replicas, then 3: the copies placed for 4 devices must not serve the 3-device call
    model, variables, x = make("mlp", 8, seed=13)
    variables = jax.device_put(variables, jax.devices()[0])
    dp = DataParallel(model, [0, 1, 2, 3], strategy=strategy)
    for batch, replicas in ((8, 4), (5, 3)):
        rows = x[:batch] + batch  # fresh values per call
        out = dp.apply(variables, rows)
        assert len(dp.last_plan.devices) == replicas
        np.testing.assert_allclose(np.asarray(out), np.asarray(model.apply(variables, rows)), rtol=1e-5, atol=1e-6)
    assert (dp.cache.misses, dp.cache.hits) == (2, 0)


@pytest.mark.parametrize("batch", [8, 7])  # 7 on 4: chunks 2, 2, 2, 1, the last one short
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_gathering_scalars_warns_as_torch_and_returns_one_value_per_replica(strategy, batch):
    rng = np.random.default_rng(14 + batch)
    w, x = rng.standard_normal(3).astype(np.float32), rng.standard_normal((batch, 3)).astype(np.float32)
    dp = DataParallel(lambda v, x: jnp.sum(x @ v["w"]), [0, 1, 2, 3], strategy=strategy)
    with pytest.warns(UserWarning, match=r"^Was asked to gather along dimension 0, but all input tensors were "
                                         r"scalars; will instead unsqueeze and return a vector\.$"):
        out = dp.apply({"w": w}, x)
    per_chunk = [(x[start:start + 2] @ w).sum() for start in range(0, batch, 2)]
    assert out.shape == (4,)
    np.testing.assert_allclose(np.asarray(out), per_chunk, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_repeated_calls_with_same_shapes_do_not_recompile(strategy):
    # an odd batch of its own per strategy, which no other test uses: an equal module shares compiled programs
    # across tests, and 'pmap' and 'sharded' share the switch program of an uneven batch
    batch = 11 + 2 * list(STRATEGIES).index(strategy)
    model, variables, x = make("mlp", batch, seed=9)
    dp = DataParallel(model, [0, 1, 2, 3], strategy=strategy)
    with counting_compiles() as first:
        dp.apply(variables, x)
    fresh = [make("mlp", batch, seed=seed)[1:] for seed in (10, 11)]  # new values and arrays, same shapes
    with counting_compiles() as again:
        for new_variables, new_x in fresh:
            dp.apply(new_variables, new_x)
    assert first.count > 0 and again.count == 0


@pytest.mark.parametrize("strategy", ["shard_map", pytest.param("pmap", marks=pytest.mark.slow),
                                      pytest.param("sharded", marks=pytest.mark.slow)])
def test_grad_through_sync_batchnorm_equals_full_batch_grad(strategy):
    # BN's pmean over the replica axis must transpose to a sum over replicas, once (shard_map runs
    # with check_vma=False, like jax.pmap): the gradient is the full-batch model's.
    model, variables, x = make("convbn", 8, seed=12, axis_name="batch")
    plain, _, _ = make("convbn", 8, seed=12)
    target = np.random.default_rng(12).standard_normal((8, 3)).astype(np.float32)
    dp = DataParallel(model, [0, 1, 2, 3], strategy=strategy, axis_name="batch")

    def loss(apply, v):
        out, _ = apply(v, x, True, mutable=["batch_stats"])
        return jnp.sum((out - target) ** 2)

    grads = jax.grad(lambda v: loss(dp.apply, v))(variables)
    expected = jax.grad(lambda v: loss(plain.apply, v))(variables)
    jax.tree.map(lambda g, e: np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=1e-4, atol=1e-5),
                 grads, expected)
