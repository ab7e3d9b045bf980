"""Replica 0's collections (`reduce_collections` without sync): one jitted copy of the whole tree.

The mapped strategies return their collections stacked per replica and keep replica 0's, as torch's
DataParallel keeps replica 0's buffers. The pick is a copy: every leaf must come back bitwise, with its
dtype, on the device it was placed on; and it costs one program per tree of shapes, not one eager slice
(dynamic_slice + squeeze) per leaf shape.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from _helpers_jax import assert_committed_to, counting_compiles, devices
from hypothesis import given, settings
from hypothesis import strategies as st

from dp_jax.strategies import reduce_collections

DTYPES = (np.float32, np.float16, ml_dtypes.bfloat16, np.int32, np.uint8, np.bool_)


def _leaf(rng: np.random.Generator, replicas: int, shape: tuple[int, ...], dtype) -> np.ndarray:
    """Fresh values of every kind a float can hold (signed zeros, subnormals, inf, nan) or random ints/bools."""
    if np.dtype(dtype).kind == "f":
        pool = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-42, -3.5e-8], np.float32)
        values = np.where(rng.random((replicas, *shape)) < 0.2, rng.choice(pool, (replicas, *shape)),
                          rng.standard_normal((replicas, *shape)) * 10.0 ** rng.integers(-30, 30))
        with np.errstate(over="ignore"):  # beyond a half float's range: inf, one more kind of value
            return values.astype(dtype)
    if dtype is np.bool_:
        return rng.random((replicas, *shape)) < 0.5
    return rng.integers(0, 200, (replicas, *shape)).astype(dtype)


@settings(max_examples=25, deadline=None)
@given(replicas=st.integers(1, 8), seed=st.integers(0, 2**32 - 1),
       shapes=st.lists(st.lists(st.integers(0, 5), max_size=3).map(tuple), min_size=1, max_size=4),
       dtypes=st.lists(st.sampled_from(DTYPES), min_size=4, max_size=4), device_index=st.integers(0, 3))
def test_replica_zeros_pick_is_each_leafs_entry_0_bitwise_on_its_device(replicas, seed, shapes, dtypes,
                                                                         device_index):
    rng = np.random.default_rng(seed)
    host = {f"layer{i}": {"stat": _leaf(rng, replicas, shape, dtype)}
            for i, (shape, dtype) in enumerate(zip(shapes, dtypes))}
    device = devices(4)[device_index]
    picked = reduce_collections(jax.device_put(host, device), replicas, sync=False)
    assert jax.tree.structure(picked) == jax.tree.structure(host)
    for got, sent in zip(jax.tree.leaves(picked), jax.tree.leaves(host)):
        assert got.dtype == sent.dtype and got.shape == sent.shape[1:]
        # bitwise: nan payloads and -0.0 included (a view as bytes compares them exactly)
        assert np.asarray(got).tobytes() == sent[0].tobytes()
    assert_committed_to(picked, device)


def test_replica_zeros_pick_compiles_one_program_for_all_its_leaf_shapes():
    # shapes no other test uses, so no eager slice of them is cached yet: before, 2 programs per shape
    rng = np.random.default_rng(37)
    shapes = [(3, 37, 2), (3, 41), (3, 43, 1), (3, 47)]
    stacked = jax.device_put({str(i): rng.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)},
                             devices(4)[0])
    with counting_compiles() as first:
        picked = reduce_collections(stacked, 3, sync=False)
    with counting_compiles() as again:
        reduce_collections(stacked, 3, sync=False)
    assert (first.count, again.count) == (1, 0), (first.count, again.count)
    for key, leaf in picked.items():
        np.testing.assert_array_equal(np.asarray(leaf), np.asarray(stacked[key])[0])


def test_no_collections_compile_nothing_and_come_back_as_given():
    with counting_compiles() as counted:
        assert reduce_collections({}, 4, sync=False) == {}
        assert reduce_collections({"batch_stats": {}}, 4, sync=False) == {"batch_stats": {}}
    assert counted.count == 0


def test_inside_a_trace_the_pick_is_replica_zeros_entry():
    stacked = {"mean": jnp.arange(12.0).reshape(4, 3), "count": jnp.arange(4)}
    picked = jax.jit(lambda s: reduce_collections(s, 4, sync=False))(stacked)
    np.testing.assert_array_equal(np.asarray(picked["mean"]), [0.0, 1.0, 2.0])
    assert int(picked["count"]) == 0
