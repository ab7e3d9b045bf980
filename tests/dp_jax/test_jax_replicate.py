"""dp_jax.replicate: one committed copy per device; replica 0 aliases the original; differentiable."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers_jax import assert_committed_to, assert_trees_equal, devices
from _models_jax import mlp_and_variables

import dp_jax


def buffer(array: jax.Array) -> int:
    return array.unsafe_buffer_pointer()


@pytest.mark.parametrize("seed, n", [(0, 2), (1, 4), (2, 8)])
def test_every_replica_leaf_is_committed_to_its_device_with_the_original_values(seed, n):
    _, variables = mlp_and_variables(seed)
    replicas = dp_jax.replicate(variables, devices(n))
    assert len(replicas) == n
    for replica, device in zip(replicas, devices(n)):
        assert_committed_to(replica, device)
        assert_trees_equal(replica, variables)


def test_replica_0_is_the_original_array_when_it_is_committed_to_device_0():
    _, variables = mlp_and_variables(3)
    variables = jax.device_put(variables, devices(1)[0])
    replica0 = dp_jax.replicate(variables, devices(3))[0]
    for original, replicated in zip(*map(jax.tree_util.tree_leaves, (variables, replica0))):
        assert replicated is original


def test_replica_0_shares_the_buffer_of_uncommitted_arrays_on_device_0():
    weight = jnp.arange(6.0).reshape(2, 3)  # uncommitted, on the default device 0
    replica0 = dp_jax.replicate({"w": weight}, devices(2))[0]
    assert replica0["w"].committed and buffer(replica0["w"]) == buffer(weight)


def test_other_replicas_are_fresh_copies_even_on_a_repeated_device():
    weight = jax.device_put(jnp.ones((4, 4)), devices(1)[0])
    replicas = dp_jax.replicate({"w": weight}, [0, 0, 0])
    pointers = [buffer(r["w"]) for r in replicas]
    assert pointers[0] == buffer(weight) and len(set(pointers)) == 3


def test_replica_0_is_a_copy_when_the_variables_live_on_another_device():
    weight = jax.device_put(jnp.ones((3,)), devices(4)[3])
    replicas = dp_jax.replicate({"w": weight}, devices(2))
    assert_committed_to(replicas[0], devices(1)[0])
    assert weight.devices() == {devices(4)[3]}


def test_numpy_leaves_are_placed_and_non_array_leaves_are_shared_by_reference():
    marker = object()
    replicas = dp_jax.replicate({"w": np.ones((2, 2), np.float32), "tag": marker, "none": None}, devices(3))
    for replica, device in zip(replicas, devices(3)):
        assert replica["tag"] is marker and replica["none"] is None
        assert_committed_to(replica["w"], device)


def test_replicate_leaves_user_arrays_usable_and_unchanged():
    _, variables = mlp_and_variables(4)
    expected = jax.tree_util.tree_map(np.array, variables)
    dp_jax.replicate(variables, devices(4))
    assert not any(leaf.is_deleted() for leaf in jax.tree_util.tree_leaves(variables))
    assert_trees_equal(variables, expected)


@pytest.mark.parametrize("home", [0, 5])
def test_gradient_through_replicate_sums_replica_gradients_onto_the_original_device(home):
    values = np.random.default_rng(home).normal(size=(3,)).astype(np.float32)
    weight = jax.device_put(values, devices(6)[home])
    coefficients = [1.0, -2.0, 0.5]

    def loss(weight):
        replicas = dp_jax.replicate({"w": weight}, devices(3))
        per_replica = [c * jnp.sum(r["w"] ** 2) for c, r in zip(coefficients, replicas)]
        return sum(jax.device_put(value, devices(1)[0]) for value in per_replica)

    grad = jax.grad(loss)(weight)
    assert grad.devices() == {devices(6)[home]}
    np.testing.assert_allclose(np.asarray(grad), 2 * sum(coefficients) * np.asarray(weight), rtol=1e-6)


@pytest.mark.parametrize("kind", ["numpy", "uncommitted"])
def test_gradient_through_replicate_of_uncommitted_variables_lands_on_device_0(kind):
    # jax.grad makes numpy variables uncommitted arrays; their replicas' gradients used to stay on
    # each replica's device, and summing them raised JAX's "incompatible devices"
    values = np.random.default_rng(len(kind)).normal(size=(3,)).astype(np.float32)
    weight = values if kind == "numpy" else jnp.asarray(values)
    coefficients = [1.0, -2.0, 0.5]

    def loss(weight):
        replicas = dp_jax.replicate({"w": weight}, devices(3))
        return sum(jax.device_put(c * jnp.sum(r["w"] ** 2), devices(1)[0]) for c, r in zip(coefficients, replicas))

    grad = jax.grad(loss)(weight)
    assert grad.devices() == {devices(1)[0]}
    np.testing.assert_allclose(np.asarray(grad), 2 * sum(coefficients) * values, rtol=1e-6)


@pytest.mark.parametrize("strategy", dp_jax.STRATEGIES)
def test_eager_grad_through_every_strategy_takes_numpy_variables(strategy):
    rng = np.random.default_rng(7)
    variables = {"w": rng.normal(size=(3, 2)).astype(np.float32)}
    x = rng.normal(size=(5, 3)).astype(np.float32)
    dp = dp_jax.DataParallel(lambda v, a: jnp.tanh(a @ v["w"]), devices(4), strategy=strategy)
    grad = jax.grad(lambda v: dp.apply(v, x).sum())(variables)
    expected = jax.grad(lambda v: jnp.tanh(x @ v["w"]).sum())(variables)
    np.testing.assert_allclose(np.asarray(grad["w"]), np.asarray(expected["w"]), rtol=1e-5, atol=1e-6)


def test_replicate_to_no_devices_says_pass_at_least_one():
    with pytest.raises(ValueError, match=r"devices is empty"):
        dp_jax.replicate({"w": jnp.ones(2)}, [])


def test_replicate_to_a_device_index_out_of_range_names_it():
    with pytest.raises(ValueError, match=r"devices\[2\]=42 is out of range"):
        dp_jax.replicate({"w": jnp.ones(2)}, [0, 1, 42])


def test_replicate_to_a_device_string_says_what_to_pass():
    with pytest.raises(TypeError, match=r"devices\[0\]='cuda:0' is not a device; pass a jax.Device"):
        dp_jax.replicate({"w": jnp.ones(2)}, ["cuda:0"])
