"""DataParallel.placed: where each strategy puts replica i's variables and inputs, and its padding."""
from __future__ import annotations

import jax
import numpy as np
import pytest
from _chunks import torch_chunk_sizes
from _helpers_jax import array_leaves, assert_committed_to, assert_trees_equal, devices
from _models_jax import make

import dp_jax
from dp_jax import DataParallel, ReplicaPlacement

STRATEGIES = dp_jax.STRATEGIES
MAPPED = dp_jax.MAPPED_STRATEGIES
# docs/strategies.md: pmap and sharded take a (replica, row) reshaped batch, shard_map the rows as they are
MAPPED_LAYOUT_HAS_REPLICA_AXIS = {"pmap": 1, "sharded": 1, "shard_map": 0}


def call_args(batch: int, seed: int):
    """MLP variables committed to device 0, and (args, kwargs) with an array kwarg and a static flag."""
    model, variables, x = make("mlp", batch, seed)
    mask = np.random.default_rng(seed).integers(0, 2, size=(batch, 1)).astype(np.float32)
    return model, jax.device_put(variables, devices(1)[0]), (x, False), {"mask": mask}


def rows_of(placed: ReplicaPlacement, i: int) -> np.ndarray:
    """Replica i's x as a (rows, features) array (the mapped layouts keep a size-1 replica axis)."""
    (x, _), _ = placed.inputs_per_replica[i]
    return np.asarray(x).reshape(-1, x.shape[-1])


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("batch,n", [(8, 4), (5, 4), (7, 3), (9, 4)])
def test_every_leaf_of_replica_i_is_on_device_i(strategy, batch, n):
    model, variables, args, kwargs = call_args(batch, seed=batch + n)
    placed = DataParallel(model, devices(n), strategy=strategy).placed(variables, *args, **kwargs)
    used = torch_chunk_sizes(batch, n)  # the tests' own torch chunking, not dp_jax's
    assert list(placed.plan.chunk_sizes) == used
    assert placed.plan.devices == tuple(devices(len(used)))
    assert len(placed.variables_per_replica) == len(placed.inputs_per_replica) == len(used)
    for i, device in enumerate(placed.plan.devices):
        assert_committed_to(placed.variables_per_replica[i], device)
        assert_committed_to(placed.inputs_per_replica[i], device)
        (_, train), replica_kwargs = placed.inputs_per_replica[i]
        assert train is False and set(replica_kwargs) == {"mask"}
        assert_trees_equal(jax.tree.map(np.asarray, placed.variables_per_replica[i]),
                           jax.tree.map(np.asarray, variables))


@pytest.mark.parametrize("strategy,uneven", [*((s, "exact") for s in STRATEGIES), *((s, "pad") for s in MAPPED)])
def test_replica_i_holds_torch_rows_and_padding_only_when_asked(strategy, uneven):
    model, variables, args, kwargs = call_args(5, seed=3)
    x = args[0]
    dp = DataParallel(model, devices(4), strategy=strategy, uneven=uneven)
    placed = dp.placed(variables, *args, **kwargs)
    assert placed.plan.chunk_sizes == (2, 2, 1)
    assert placed.plan.pad_rows == (1 if uneven == "pad" else 0)
    np.testing.assert_array_equal(rows_of(placed, 0), x[0:2])
    np.testing.assert_array_equal(rows_of(placed, 1), x[2:4])
    last = rows_of(placed, 2)
    assert len(last) == 1 + placed.plan.pad_rows
    np.testing.assert_array_equal(last, np.repeat(x[4:5], len(last), axis=0))  # padding repeats row 4


@pytest.mark.parametrize("strategy", MAPPED)
def test_the_short_chunk_computes_on_its_own_device_from_its_own_rows_and_the_replicated_variables(strategy):
    model, variables, args, kwargs = call_args(11, seed=8)
    dp = DataParallel(lambda v, x, train, mask: model.apply(v, x, train) * mask, devices(4), strategy=strategy)
    placed = dp.placed(variables, *args, **kwargs)
    (x, _), replica_kwargs = placed.inputs_per_replica[3]
    replica_axis = MAPPED_LAYOUT_HAS_REPLICA_AXIS[strategy]  # as the other replicas of the same program
    assert x.shape == (1,) * replica_axis + (2, args[0].shape[1]) and x.devices() == {devices(4)[3]}
    np.testing.assert_array_equal(np.asarray(x).reshape(2, -1), args[0][9:11])  # rows 9, 10 only
    np.testing.assert_array_equal(np.asarray(replica_kwargs["mask"]).reshape(2, -1), kwargs["mask"][9:11])
    assert_committed_to(placed.variables_per_replica[3], devices(4)[3])
    dp.apply(variables, *args, **kwargs)
    assert (dp.cache.misses, dp.cache.hits) == (1, 1)  # placed() sent the variables once; apply reused them


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_replica_0_shares_the_original_buffers_and_the_others_copy(strategy):
    model, variables, args, kwargs = call_args(8, seed=4)
    placed = DataParallel(model, devices(4), strategy=strategy).placed(variables, *args, **kwargs)
    original = [leaf.unsafe_buffer_pointer() for leaf in array_leaves(variables)]
    for i, replica in enumerate(placed.variables_per_replica):
        pointers = [leaf.unsafe_buffer_pointer() for leaf in array_leaves(replica)]
        assert (pointers == original) == (i == 0), i


@pytest.mark.parametrize("strategy", MAPPED)
def test_views_are_the_buffers_the_next_apply_uses(strategy):
    model, variables, args, kwargs = call_args(8, seed=5)
    dp = DataParallel(lambda v, x, train, mask: model.apply(v, x, train) * mask, devices(4), strategy=strategy)
    placed = dp.placed(variables, *args, **kwargs)
    for i in range(4):
        cached = [leaf.addressable_shards[i].data for leaf in array_leaves(dp.place(variables, 8))]
        assert ([a.unsafe_buffer_pointer() for a in cached]
                == [a.unsafe_buffer_pointer() for a in array_leaves(placed.variables_per_replica[i])])
    dp.apply(variables, *args, **kwargs)
    assert dp.cache.misses == 1  # placed() sent the variables; apply and place() found them cached


def test_explicit_agrees_with_replicate_and_scatter_kwargs():
    model, variables, args, kwargs = call_args(5, seed=6)
    placed = DataParallel(model, devices(4)).placed(variables, *args, **kwargs)
    chunk_args, chunk_kwargs = dp_jax.scatter_kwargs(args, kwargs, devices(4))
    replicas = dp_jax.replicate(variables, devices(len(chunk_args)))
    assert len(placed.inputs_per_replica) == len(chunk_args) == 3
    for i, (replica_args, replica_kwargs) in enumerate(placed.inputs_per_replica):
        assert_trees_equal(replica_args, chunk_args[i])
        assert_trees_equal(replica_kwargs, chunk_kwargs[i])
        assert_trees_equal(placed.variables_per_replica[i], replicas[i])
        assert [a.devices() for a in array_leaves(placed.inputs_per_replica[i])] == \
               [a.devices() for a in array_leaves((chunk_args[i], chunk_kwargs[i]))]


@pytest.mark.parametrize("strategy", ["explicit", "sharded"])
def test_placed_names_the_leaf_of_a_different_batch(strategy):
    model, variables, args, _ = call_args(6, seed=7)
    with pytest.raises(ValueError, match=rf"placed\(strategy='{strategy}'\): leaf kwargs\['mask'\] has batch 4 "
                                         r"but args\[0\] has 6"):
        DataParallel(model, devices(2), strategy=strategy).placed(variables, *args, mask=np.ones((4, 1)))
