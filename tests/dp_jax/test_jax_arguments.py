"""dp_jax outside the strategies: repr like torch's, `dim` checked when given, the user's error types kept."""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dp_jax


class Wide(nn.Module):
    features: int = 3

    @nn.compact
    def __call__(self, x):
        return nn.Dense(self.features)(x)


def test_repr_shows_the_module_devices_and_strategy_as_torch_shows_its_module():
    devices = jax.devices()[1:4]
    text = repr(dp_jax.DataParallel(Wide(features=5), devices, output_device=2, dim=-1, strategy="pmap"))
    lines = text.splitlines()
    assert lines[0] == "DataParallel(" and lines[1].startswith("  (module): Wide(") and lines[-1] == ")"
    assert "features = 5" in text
    assert lines[-2] == "  device_ids=[cpu:1, cpu:2, cpu:3], output_device=cpu:2, dim=-1, strategy='pmap'"


def test_repr_of_an_apply_function_names_the_function():
    def apply_fn(variables, x):
        return x

    text = repr(dp_jax.DataParallel(apply_fn, [0, 1], strategy="shard_map", axis_name="batch"))
    assert "(module): <function test_repr_of_an_apply_function_names_the_function.<locals>.apply_fn" in text
    assert "strategy='shard_map', axis_name='batch'" in text


BAD_DIMS = ["0", 1.0, None, True]


@pytest.mark.parametrize("dim", BAD_DIMS, ids=repr)
def test_a_dim_that_is_not_an_int_is_refused_when_data_parallel_is_built(dim):
    with pytest.raises(TypeError) as raised:
        dp_jax.DataParallel(Wide(), [0, 1], dim=dim)
    assert str(raised.value) == (f"DataParallel: dim={dim!r} is not an int; pass the batch dimension as an int, "
                                 "e.g. dim=0 (dim=-1 for the last)")


@pytest.mark.parametrize("dim", BAD_DIMS, ids=repr)
@pytest.mark.parametrize("step", ["scatter", "scatter_kwargs", "gather"])
def test_a_dim_that_is_not_an_int_is_refused_by_each_step_even_without_arrays(step, dim):
    calls = {"scatter": lambda: dp_jax.scatter((1, "text"), [0, 1], dim=dim),
             "scatter_kwargs": lambda: dp_jax.scatter_kwargs((np.ones((4, 2)),), {}, [0, 1], dim=dim),
             "gather": lambda: dp_jax.gather([jnp.ones((2, 2)), jnp.ones((2, 2))], 0, dim=dim)}
    with pytest.raises(TypeError, match=rf"^{step}: dim=.* is not an int; pass the batch dimension as an int"):
        calls[step]()


def test_numpy_integer_dims_are_ints():
    chunks = dp_jax.scatter((np.arange(8.0).reshape(2, 4),), [0, 1], dim=np.int64(1))
    assert [c[0].shape for c in chunks] == [(2, 2), (2, 2)]


@pytest.mark.parametrize("strategy", dp_jax.STRATEGIES)
def test_a_flax_error_from_the_users_model_keeps_its_type_in_every_strategy(strategy):
    from flax.errors import ScopeParamShapeError

    variables = Wide().init(jax.random.key(0), jnp.ones((2, 4)))
    with pytest.raises(ScopeParamShapeError) as raised:  # inputs of width 5 for a kernel made for 4
        dp_jax.DataParallel(Wide(), [0, 1], strategy=strategy).apply(variables, jnp.ones((4, 5)))
    assert "expected to generate shape (5, 3)" in str(raised.value)
    if strategy == "explicit":  # parallel_apply says where, as torch's ExceptionWrapper does
        assert str(raised.value).startswith("Caught ScopeParamShapeError in replica 0 on device cpu:0.")


class NeedsTwoArguments(Exception):
    def __init__(self, code: int, detail: str):
        super().__init__(f"code {code}: {detail}")
        self.code = code


def test_parallel_apply_rebuilds_an_error_whose_constructor_takes_other_arguments():
    def apply_fn(variables, x):
        if x.shape[0] == 1:
            raise NeedsTwoArguments(7, "short chunk")
        return x

    chunks = dp_jax.scatter((jnp.ones((3, 2)),), [0, 1])
    with pytest.raises(NeedsTwoArguments) as raised:
        dp_jax.parallel_apply(apply_fn, [{}, {}], chunks, devices=[0, 1])
    assert str(raised.value).startswith("Caught NeedsTwoArguments in replica 1 on device cpu:1.")
    assert "code 7: short chunk" in str(raised.value) and raised.value.code == 7


@pytest.mark.parametrize("method", ["plan", "place"])
@pytest.mark.parametrize("bad", [-1, -5, np.int64(-2)])
def test_a_negative_batch_size_is_refused_naming_batch_size(method, bad):
    dp = dp_jax.DataParallel(Wide(), jax.devices()[:4])
    variables = Wide().init(jax.random.PRNGKey(0), jnp.ones((1, 2)))
    with pytest.raises(dp_jax.UsageError) as raised:
        dp.plan(bad) if method == "plan" else dp.place(variables, bad)
    assert f"batch_size={bad!r} is negative; pass the number of rows, an integer >= 0" in str(raised.value)


@pytest.mark.parametrize("bad", ["5", 2.5, True, [4], np.float32(3.0)])
def test_a_batch_size_that_is_not_an_integer_is_a_usage_type_error(bad):
    with pytest.raises(dp_jax.UsageTypeError) as raised:
        dp_jax.DataParallel(Wide(), jax.devices()[:4], strategy="pmap").plan(bad)
    assert str(raised.value).startswith(f"DataParallel.plan: batch_size={bad!r} is not an integer")


@pytest.mark.parametrize("batch_size, sizes", [(0, (0, 0, 0, 0)), (np.int32(5), (2, 2, 1)), (None, ())])
def test_batch_sizes_apply_takes_are_planned_as_apply_plans_them(batch_size, sizes):
    plan = dp_jax.DataParallel(Wide(), jax.devices()[:4]).plan(batch_size)
    assert plan.chunk_sizes == sizes and plan.batch_size == batch_size
    if batch_size is not None:  # apply on that many rows makes the same plan
        dp = dp_jax.DataParallel(Wide(), jax.devices()[:4])
        dp.apply(Wide().init(jax.random.PRNGKey(0), jnp.ones((1, 2))), jnp.ones((int(batch_size), 2)))
        assert dp.last_plan.chunk_sizes == sizes
