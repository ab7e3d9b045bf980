"""dp_jax's eager transfers under jax.grad run no program that computes nothing new.

`replicate` (and the mapped strategies' placement) send parameters, which are differentiated, with
constants such as BatchNorm statistics, which are not: one device_put call for both made JAX's eager AD
build a zero tangent per constant (a broadcast program per shape). `gather` concatenated through
jnp, whose dtype promotion bound an identity convert per replica shape (a program each under the
eager AD). The copies and gradients must stay what they were: bitwise.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from _helpers_jax import assert_committed_to, counting_compiles, devices
from hypothesis import given, settings
from hypothesis import strategies as st

from dp_jax import DataParallel, gather, replicate
from dp_jax._devices import device_put_apart

FLOATS = (np.float32, np.float16, ml_dtypes.bfloat16)


def _fresh_shapes(seed: int, count: int) -> list[tuple[int, ...]]:
    """Shapes no other test draws (a first dimension of 50-90), so no eager program of them is cached yet."""
    rng = np.random.default_rng(seed)
    return [(int(rng.integers(50, 90)), int(rng.integers(1, 4))) for _ in range(count)]


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(2, 4), constants=st.integers(1, 3))
def test_replicate_under_grad_builds_no_zero_tangents_for_constants(seed, n, constants):
    rng = np.random.default_rng(seed)
    shapes = _fresh_shapes(seed, constants)
    params = jax.device_put({"w": rng.standard_normal((3, 2)).astype(np.float32)}, devices(1)[0])
    stats = jax.device_put({f"s{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)},
                           devices(1)[0])
    with counting_compiles() as counted:
        replicas, _ = jax.vjp(lambda p: replicate({"params": p, "batch_stats": stats}, devices(n)), params)
    assert counted.count == 0, f"{counted.count} programs to copy {constants} constants to {n} devices"
    for replica, device in zip(replicas, devices(n)):
        assert_committed_to(replica, device)
        for got, sent in zip(jax.tree.leaves(replica), jax.tree.leaves({"params": params, "batch_stats": stats})):
            np.testing.assert_array_equal(np.asarray(got), np.asarray(sent))


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), dtype=st.sampled_from(FLOATS), n=st.integers(2, 4))
def test_gather_under_grad_compiles_only_its_concatenation(seed, dtype, n):
    rng = np.random.default_rng(seed)
    rows = [int(r) for r in rng.integers(1, 6, n)]
    width = int(rng.integers(50, 90))  # fresh: no other test concatenates this width
    host = [rng.standard_normal((r, width)).astype(dtype) for r in rows]
    outputs = [jax.device_put(h, d) for h, d in zip(host, devices(n))]
    with counting_compiles() as counted:
        gathered, pullback = jax.vjp(lambda outs: gather(outs, devices(n)[0]), outputs)
    assert counted.count <= 1, f"{counted.count} programs to concatenate {n} outputs"
    assert gathered.dtype == dtype
    assert np.asarray(gathered).tobytes() == np.concatenate(host).tobytes()
    cotangent = rng.standard_normal(gathered.shape).astype(dtype)
    pieces = pullback(jax.device_put(cotangent, devices(n)[0]))[0]
    splits = np.split(cotangent, np.cumsum(rows)[:-1])
    for piece, expected in zip(pieces, splits):
        assert np.asarray(piece).tobytes() == expected.tobytes()


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), traced=st.lists(st.booleans(), min_size=1, max_size=5),
       device_index=st.integers(0, 3))
def test_device_put_apart_sends_every_leaf_where_device_put_does(seed, traced, device_index):
    rng = np.random.default_rng(seed)
    leaves = [rng.standard_normal(int(rng.integers(1, 5))).astype(np.float32) for _ in traced]
    device = devices(4)[device_index]

    def sent(differentiated):
        tree = [d if is_traced else c for d, c, is_traced in zip(differentiated, leaves, traced)]
        return device_put_apart({"leaves": tree}, device)["leaves"]
    moved, pullback = jax.vjp(sent, [jnp.asarray(leaf) for leaf in leaves])
    assert_committed_to(moved, device)
    for got, leaf in zip(moved, leaves):
        np.testing.assert_array_equal(np.asarray(got), leaf)
    cotangents = [jax.device_put(rng.standard_normal(leaf.shape).astype(np.float32), device) for leaf in leaves]
    grads = pullback(cotangents)[0]
    for grad, cotangent, is_traced in zip(grads, cotangents, traced):
        np.testing.assert_array_equal(np.asarray(grad), np.asarray(cotangent) if is_traced else 0.0)


def test_explicit_batchnorm_step_gradient_is_the_same_with_fewer_programs():
    # the eager path users differentiate: parameters traced, statistics constant, 4 replicas
    rng = np.random.default_rng(5)
    params = {"w": jnp.asarray(rng.standard_normal((4, 3)).astype(np.float32))}
    stats = {"mean": jnp.asarray(rng.standard_normal(3).astype(np.float32))}
    x = jnp.asarray(rng.standard_normal((10, 4)).astype(np.float32))

    def model(variables, x):
        h = x @ variables["params"]["w"]
        return jnp.tanh(h - variables["batch_stats"]["mean"]), {"mean": h.mean(0)}
    dp = DataParallel(model, devices(4), strategy="explicit")
    grad = jax.grad(lambda p: dp.apply({"params": p, "batch_stats": stats}, x)[0].sum())(params)
    chunks = np.split(np.asarray(x), [3, 6, 9])
    expected = sum(jax.grad(lambda p, c=c: model({"params": p, "batch_stats": stats}, c)[0].sum())(params)["w"]
                   for c in chunks)
    np.testing.assert_allclose(np.asarray(grad["w"]), np.asarray(expected), rtol=1e-5, atol=1e-6)
