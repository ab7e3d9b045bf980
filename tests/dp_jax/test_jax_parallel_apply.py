"""dp_jax.parallel_apply: one jitted apply per replica on its device; cached compiles; torch's checks.

Ends with the whole explicit pipeline (scatter, replicate, parallel_apply, gather) under jax.grad,
compared with single-device JAX.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers_jax import assert_committed_to, counting_compiles, devices
from _models_jax import batch, mlp_and_variables

import dp_jax


def placed(seed: int, size: int, n: int):
    """(model, replicas, chunks, devices) for a batch of `size` rows on n devices."""
    model, variables = mlp_and_variables(seed)
    chunks = dp_jax.scatter(batch(seed, size), devices(n))
    used = devices(len(chunks))
    return model, dp_jax.replicate(variables, used), chunks, used


@pytest.mark.parametrize("seed, size, n", [(0, 10, 4)])
def test_each_output_is_the_single_device_apply_of_its_chunk_on_the_replicas_device(seed, size, n):
    model, replicas, chunks, used = placed(seed, size, n)
    outputs = dp_jax.parallel_apply(model.apply, replicas, chunks)
    assert len(outputs) == len(chunks)
    for output, replica, chunk, device in zip(outputs, replicas, chunks, used):
        assert_committed_to(output, device)
        reference = jax.jit(model.apply)(jax.device_get(replica), np.asarray(chunk))
        np.testing.assert_array_equal(np.asarray(output), np.asarray(reference))


def test_a_repeated_call_with_the_same_shapes_compiles_nothing():
    def apply(variables, x):  # a function no other test compiled
        return jnp.tanh(x @ variables["w"])

    chunks = dp_jax.scatter(batch(3, 10), devices(4))  # 3, 3, 3, 1 rows
    replicas = dp_jax.replicate({"w": batch(4, 5, features=2)}, devices(4))
    with counting_compiles() as first:
        jax.block_until_ready(dp_jax.parallel_apply(apply, replicas, chunks))
    with counting_compiles() as second:
        jax.block_until_ready(dp_jax.parallel_apply(apply, replicas, chunks))
    assert first.count == 4  # one program per (shape, device): (3, cpu:0), (3, cpu:1), (3, cpu:2), (1, cpu:3)
    assert second.count == 0


def test_a_new_non_array_argument_recompiles_and_is_used_as_a_python_value():
    model, replicas, chunks, _ = placed(4, 6, 2)
    once = dp_jax.parallel_apply(model.apply, replicas, chunks, [{"scale": 1.0}] * 2)
    with counting_compiles() as counter:
        twice = dp_jax.parallel_apply(model.apply, replicas, chunks, [{"scale": 2.0}] * 2)
    assert counter.count == 2
    for a, b in zip(once, twice):
        np.testing.assert_allclose(np.asarray(b), 2 * np.asarray(a), rtol=1e-6)


def test_equal_non_array_arguments_of_different_types_are_not_confused():
    def apply(replica, x, flag):
        return x * (10.0 if isinstance(flag, bool) else 1.0)

    outputs = [dp_jax.parallel_apply(apply, [{}], [(jnp.ones(1), flag)], devices=[0])[0] for flag in (1, True)]
    assert [float(o[0]) for o in outputs] == [1.0, 10.0]


def test_tuple_and_list_inputs_are_unpacked_and_anything_else_is_one_argument():
    def apply(replica, *args):
        return replica["w"] * len(args)

    replicas = dp_jax.replicate({"w": jnp.ones(2)}, devices(3))
    inputs = [(jnp.ones(1), jnp.ones(1)), [jnp.ones(1)] * 3, jnp.ones(1)]
    outputs = dp_jax.parallel_apply(apply, replicas, inputs)
    assert [float(o[0]) for o in outputs] == [2.0, 3.0, 1.0]


def test_devices_none_takes_each_replicas_device_and_uncommitted_inputs_follow_it():
    replicas = dp_jax.replicate({"w": jnp.ones((3, 2))}, devices(4)[1:])  # cpu:1, cpu:2, cpu:3
    inputs = [np.ones((2, 3), np.float32)] * 3  # numpy: not committed anywhere
    outputs = dp_jax.parallel_apply(lambda r, x: x @ r["w"], replicas, inputs)
    for output, device in zip(outputs, devices(4)[1:]):
        assert_committed_to(output, device)


def test_explicit_devices_place_uncommitted_replicas_and_inputs():
    outputs = dp_jax.parallel_apply(lambda r, x: r * x, [np.float32(2)] * 2, [np.ones(3)] * 2, devices=[3, 5])
    assert [o.devices() for o in outputs] == [{devices(4)[3]}, {devices(6)[5]}]


def test_parallel_apply_leaves_user_arrays_usable_and_unchanged():
    model, replicas, chunks, _ = placed(5, 9, 3)
    before = [np.array(c) for c in chunks] + [np.array(leaf) for leaf in jax.tree_util.tree_leaves(replicas)]
    jax.block_until_ready(dp_jax.parallel_apply(model.apply, replicas, chunks))
    after_leaves = list(chunks) + jax.tree_util.tree_leaves(replicas)
    assert not any(leaf.is_deleted() for leaf in after_leaves)
    for expected, leaf in zip(before, after_leaves):
        np.testing.assert_array_equal(np.asarray(leaf), expected)


# --- errors -------------------------------------------------------------------------------------


def test_a_failing_replica_reraises_its_type_naming_the_replica_and_device():
    def apply(replica, x):
        if x.shape[0] == 1:
            raise KeyError("the last chunk is too small")
        return x

    chunks = dp_jax.scatter(batch(6, 10), devices(4))  # 3, 3, 3, 1
    with pytest.raises(KeyError, match=r"Caught KeyError in replica 3 on device cpu:3\.\nOriginal Traceback"):
        dp_jax.parallel_apply(apply, [{}] * 4, chunks)


def test_an_exception_whose_constructor_takes_other_arguments_keeps_its_type():
    class TwoPartError(Exception):
        def __init__(self, code: int, detail: str) -> None:
            super().__init__(code, detail)

    def apply(replica, x):
        raise TwoPartError(7, "bad")

    with pytest.raises(TwoPartError, match=r"Caught TwoPartError in replica 0 on device cpu:0"):
        dp_jax.parallel_apply(apply, [{}], [jnp.ones(1)], devices=[0])


def test_an_exception_that_cannot_show_the_located_message_becomes_runtime_error():
    class CodeOnlyError(Exception):
        def __init__(self, code: int) -> None:
            super().__init__()
            self.code = code

        def __str__(self) -> str:  # ignores args, so a rebuilt copy could not say where it was raised
            return f"code {self.code}"

    def apply(replica, x):
        raise CodeOnlyError(7)

    with pytest.raises(RuntimeError, match=r"Caught CodeOnlyError in replica 0 on device cpu:0(.|\n)*code 7"):
        dp_jax.parallel_apply(apply, [{}], [jnp.ones(1)], devices=[0])


@pytest.mark.parametrize("name, kwargs", [
    ("inputs", {"inputs": [jnp.ones(1)] * 2}),
    ("kwargs_tup", {"inputs": [jnp.ones(1)] * 3, "kwargs_tup": [{}] * 4}),
    ("devices", {"inputs": [jnp.ones(1)] * 3, "devices": [0, 1]}),
])
def test_length_mismatches_name_the_argument_and_both_lengths(name, kwargs):
    replicas = dp_jax.replicate({"w": jnp.ones(1)}, devices(3))
    with pytest.raises(ValueError, match=rf"got 3 replicas but \d {name}; pass one entry per replica"):
        dp_jax.parallel_apply(lambda r, x: x, replicas, **kwargs)


def test_no_replicas_is_an_error():
    with pytest.raises(ValueError, match=r"replicas is empty"):
        dp_jax.parallel_apply(lambda r, x: x, [], [])


def test_a_device_that_disagrees_with_where_the_replica_lives_is_an_error():
    replicas = dp_jax.replicate({"w": jnp.ones(1)}, devices(2))
    message = r"devices\[1\]=cpu:4 but replica 1 or its inputs are committed to cpu:1"
    with pytest.raises(ValueError, match=message):
        dp_jax.parallel_apply(lambda r, x: x, replicas, [jnp.ones(1)] * 2, devices=[0, 4])


def test_a_replica_split_across_devices_is_an_error_naming_both_leaves():
    replica = {"a": jax.device_put(jnp.ones(1), devices(2)[0]), "b": jax.device_put(jnp.ones(1), devices(2)[1])}
    message = r"replicas\[0\]\['b'\] is on cpu:1 but replicas\[0\]\['a'\] is on cpu:0"
    with pytest.raises(ValueError, match=message):
        dp_jax.parallel_apply(lambda r, x: x, [replica], [jnp.ones(1)])


def test_an_input_on_another_device_than_its_replica_names_both():
    replicas = dp_jax.replicate({"w": jnp.ones(1)}, devices(2))
    inputs = [jnp.ones(1), jax.device_put(jnp.ones(1), devices(3)[2])]
    message = r"inputs\[1\]\[0\] is on cpu:2 but replicas\[1\]\['w'\] is on cpu:1"
    with pytest.raises(ValueError, match=message):
        dp_jax.parallel_apply(lambda r, x: x, replicas, inputs)


def test_without_committed_arrays_or_devices_the_device_is_asked_for():
    with pytest.raises(ValueError, match=r"cannot tell which device replica 0 belongs to .* pass devices="):
        dp_jax.parallel_apply(lambda r, x: x, [np.ones(1)], [np.ones(1)])


def test_an_unhashable_non_array_argument_names_its_path():
    message = r"^parallel_apply: kwargs\['opts'\]\[0\] of replica 0 is a set, which is neither an array nor"
    with pytest.raises(TypeError, match=message):
        dp_jax.parallel_apply(lambda r, x, opts: x, [{}], [jnp.ones(1)], [{"opts": [{1}]}], devices=[0])


def test_an_unhashable_apply_fn_is_an_error():
    class Unhashable:
        __hash__ = None

        def __call__(self, replica, x):
            return x

    with pytest.raises(TypeError, match=r"apply_fn=.* is not hashable"):
        dp_jax.parallel_apply(Unhashable(), [{}], [jnp.ones(1)], devices=[0])


# --- the whole pipeline under jax.grad ----------------------------------------------------------


def data_parallel_output(model, variables, x, devs):
    chunks = dp_jax.scatter(x, devs)
    replicas = dp_jax.replicate(variables, devs[: len(chunks)])
    return dp_jax.gather(dp_jax.parallel_apply(model.apply, replicas, chunks), devs[0])


@pytest.mark.parametrize("seed, size, n, home", [
    (0, 5, 4, 0),  # chunks 2, 2, 1: three replicas; variables on devices[0], as torch requires
    # chunks 3, 3, 3, 1; variables on a device outside the list (the default run has this case through
    # DataParallel in test_jax_equivalence's gradient test)
    pytest.param(1, 10, 4, 6, marks=pytest.mark.slow),
    pytest.param(2, 7, 3, 2, marks=pytest.mark.slow),
    pytest.param(3, 16, 8, 0, marks=pytest.mark.slow),
])
def test_gradient_of_a_loss_on_the_gathered_output_equals_single_device_gradient(seed, size, n, home):
    model, variables = mlp_and_variables(seed)
    variables = jax.device_put(variables, devices(8)[home])
    x, target = batch(seed, size), batch(seed + 100, size, features=3)

    def loss(variables, forward):
        return jnp.mean((forward(variables) - target) ** 2)

    dp_forward = lambda v: data_parallel_output(model, v, x, devices(n))  # noqa: E731
    dp_loss, dp_grads = jax.value_and_grad(loss)(variables, dp_forward)
    ref_loss, ref_grads = jax.jit(jax.value_and_grad(lambda v: loss(v, lambda v: model.apply(v, x))))(
        jax.device_get(variables))
    np.testing.assert_allclose(float(dp_loss), float(ref_loss), rtol=1e-6)
    for dp_grad, ref_grad in zip(jax.tree_util.tree_leaves(dp_grads), jax.tree_util.tree_leaves(ref_grads)):
        assert dp_grad.devices() == {devices(8)[home]}
        np.testing.assert_allclose(np.asarray(dp_grad), np.asarray(ref_grad), rtol=1e-5, atol=1e-7)
