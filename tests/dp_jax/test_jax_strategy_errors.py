"""Errors every strategy raises in the user's terms: their argument index, the axis_name fix, the rngs entry."""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest

import dp_jax


@pytest.mark.parametrize("strategy", dp_jax.STRATEGIES)
def test_an_unhashable_argument_is_named_by_the_users_index(strategy):
    wrapper = dp_jax.DataParallel(lambda variables, x, options: x, [0, 1], strategy=strategy)
    with pytest.raises(TypeError, match=r"leaf args\[1\]\['a'\] of type set is neither an array nor hashable"):
        wrapper.apply({}, jnp.ones((4, 3)), {"a": {1, 2}})


class SyncedNorm(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.BatchNorm(use_running_average=False, axis_name="batch")(x)


@pytest.mark.parametrize("strategy", dp_jax.STRATEGIES)
def test_an_unbound_axis_name_in_the_model_says_which_axis_name_to_pass(strategy):
    variables = SyncedNorm().init(jax.random.key(0), jnp.ones((4, 3)))
    with pytest.raises(NameError) as raised:
        dp_jax.DataParallel(SyncedNorm(), [0, 1], strategy=strategy).apply(variables, jnp.ones((4, 3)),
                                                                           mutable=["batch_stats"])
    message = str(raised.value)
    assert "the model uses a collective over axis 'batch'" in message
    if strategy == "explicit":
        assert "'explicit' runs each replica apart" in message and "axis_name='batch'" in message
    else:
        assert f"pass DataParallel(..., strategy={strategy!r}, axis_name='batch')" in message


class Dropped(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dropout(0.5, deterministic=False)(x)


@pytest.mark.parametrize("strategy", dp_jax.STRATEGIES)
@pytest.mark.parametrize("key, shown", [(3, "got 3"), (jnp.ones(3, jnp.uint32), "got ArrayImpl of shape (3,)")])
def test_a_bad_prng_key_is_named_by_its_rngs_entry(strategy, key, shown):
    wrapper = dp_jax.DataParallel(Dropped(), [0, 1], strategy=strategy)
    with pytest.raises(TypeError) as raised:
        wrapper.apply({}, jnp.ones((4, 3)), rngs={"dropout": key})
    assert str(raised.value) == (f"rngs['dropout'] is not a PRNG key ({shown}); pass rngs={{'dropout': "
                                 "jax.random.key(seed)} or a key from jax.random.split")


def test_a_good_key_still_runs_every_strategy_alike():
    outputs = [dp_jax.DataParallel(Dropped(), [0, 1], strategy=s).apply({}, jnp.ones((4, 3)),
                                                                       rngs={"dropout": jax.random.key(1)})
               for s in dp_jax.STRATEGIES]
    assert all(jnp.array_equal(outputs[0], out) for out in outputs[1:])


NO_BATCH = {
    "no inputs": (lambda variables: variables["w"] * 2, ()),
    "only Python scalars": (lambda variables, a, b: variables["w"] * a + b, (2.0, 3)),
    "0 rows": (lambda variables, x: x * variables["w"][0], (jnp.ones((0, 3)),)),
}


@pytest.mark.parametrize("case", NO_BATCH)
def test_inputs_with_no_batch_give_every_strategy_explicits_answer(case):
    fn, args = NO_BATCH[case]
    variables = {"w": jnp.arange(2.0)}
    expected = dp_jax.DataParallel(fn, [0, 1], strategy="explicit").apply(variables, *args)
    for strategy in [s for s in dp_jax.STRATEGIES if s != "explicit"]:
        out = dp_jax.DataParallel(fn, [0, 1], strategy=strategy).apply(variables, *args)
        assert out.shape == expected.shape and jnp.array_equal(out, expected), strategy
