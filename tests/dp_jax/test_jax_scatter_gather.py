"""dp_jax.scatter / scatter_kwargs / gather: torch's chunking and padding, on pytrees, with placement."""
from __future__ import annotations

import collections
import dataclasses
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from _helpers_jax import assert_committed_to, assert_trees_equal, devices
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_oracle import stock  # noqa: F401  (a fixture: stock torch.nn.parallel on CPU)

import dp_jax

Pair = collections.namedtuple("Pair", ["left", "right"])


@dataclasses.dataclass
class Config:  # not a registered pytree: a leaf, shared by reference
    name: str


def rows(seed: int, *shape: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


# --- chunk sizes --------------------------------------------------------------------------------


def test_chunk_sizes_equal_torch_chunk_for_every_batch_up_to_40_and_up_to_8_devices():
    for n in range(1, 9):
        for batch in range(0, 41):
            expected = [len(c) for c in torch.zeros(batch).chunk(n)]
            assert dp_jax.chunk_sizes(batch, n) == expected, (batch, n)


def test_batch_of_5_on_4_devices_uses_3_chunks_of_2_2_1():
    chunks = dp_jax.scatter(rows(0, 5, 3), devices(4))
    assert [c.shape[0] for c in chunks] == [2, 2, 1]


def test_batch_of_10_on_4_devices_uses_chunks_of_3_3_3_1():
    chunks = dp_jax.scatter(rows(1, 10, 2), devices(4))
    assert [c.shape[0] for c in chunks] == [3, 3, 3, 1]


def test_empty_batch_gives_one_empty_chunk_per_device_like_torch():
    chunks = dp_jax.scatter(rows(2, 0, 3), devices(4))
    assert [c.shape for c in chunks] == [(0, 3)] * 4


# --- round trip (property) ----------------------------------------------------------------------


@st.composite
def batched_trees(draw):
    """A random pytree of arrays sharing one batch size along `dim`, plus that batch, dim and n."""
    batch, n, dim = draw(st.integers(1, 40)), draw(st.integers(1, 8)), draw(st.sampled_from([0, 1, -1]))
    seed = draw(st.integers(0, 2**16))
    counter = iter(range(10**6))

    def array(_):
        rank = draw(st.integers(1 if dim == 0 else 2, 3))
        shape = [draw(st.integers(1, 3)) for _ in range(rank)]
        shape[dim] = batch
        values = np.random.default_rng(seed + next(counter)).normal(size=shape) * 10
        kind = draw(st.sampled_from(["np_float32", "jax_float32", "np_int32"]))
        if kind == "np_int32":
            return values.astype(np.int32)
        values = values.astype(np.float32)
        return jnp.asarray(values) if kind == "jax_float32" else values

    leaf = st.builds(array, st.none())
    tree = st.recursive(
        leaf,
        lambda children: st.one_of(
            st.lists(children, min_size=1, max_size=3),
            st.lists(children, min_size=1, max_size=3).map(tuple),
            st.dictionaries(st.sampled_from("abcd"), children, min_size=1, max_size=3),
            st.tuples(children, children).map(lambda pair: Pair(*pair)),
        ),
        max_leaves=4,
    )
    return draw(tree), batch, n, dim


@settings(max_examples=20, deadline=None)
@given(batched_trees())
def test_gather_of_scatter_returns_the_tree_with_torch_chunk_sizes(case):
    tree, batch, n, dim = case
    devs = devices(n)
    chunks = dp_jax.scatter(tree, devs, dim)

    for leaf_index, leaf in enumerate(jax.tree_util.tree_leaves(tree)):
        torch_sizes = [t.shape[dim] for t in torch.from_numpy(np.array(leaf)).chunk(n, dim)]
        our_sizes = [jax.tree_util.tree_leaves(chunk)[leaf_index].shape[dim] for chunk in chunks]
        assert our_sizes == torch_sizes
    for chunk, device in zip(chunks, devs):
        assert jax.tree_util.tree_structure(chunk) == jax.tree_util.tree_structure(tree)
        assert_committed_to(chunk, device)

    gathered = dp_jax.gather(chunks, devs[-1], dim)
    assert_committed_to(gathered, devs[-1])
    assert_trees_equal(gathered, jax.tree_util.tree_map(np.asarray, tree))


# --- placement and sharing ----------------------------------------------------------------------


@pytest.mark.parametrize("source", ["numpy", "uncommitted", "committed_to_device_5"])
def test_every_scattered_leaf_is_committed_to_its_device(source):
    x = rows(3, 7, 2)
    value = {"numpy": x, "uncommitted": jnp.asarray(x),
             "committed_to_device_5": jax.device_put(x, devices(6)[5])}
    devs = devices(3)
    chunks = dp_jax.scatter({"x": value[source], "mask": x[:, 0] > 0}, devs)
    for chunk, device in zip(chunks, devs):
        assert_committed_to(chunk, device)
    np.testing.assert_array_equal(np.concatenate([np.asarray(c["x"]) for c in chunks]), x)


def test_non_array_leaves_are_shared_by_reference_and_none_is_kept():
    config, label = Config("run"), "a label"
    chunks = dp_jax.scatter((rows(4, 6, 2), config, {"label": label, "unused": None}), devices(3))
    assert len(chunks) == 3
    for chunk in chunks:
        assert chunk[1] is config and chunk[2]["label"] is label and chunk[2]["unused"] is None


def test_scatter_keeps_namedtuples_and_tuples_in_every_entry():
    x = rows(5, 4, 3)
    chunks = dp_jax.scatter(Pair(x, (x, [x])), devices(2))
    for chunk in chunks:
        assert type(chunk) is Pair and type(chunk.right) is tuple and type(chunk.right[1]) is list


def test_dicts_come_back_with_sorted_keys_and_ordered_dicts_keep_their_order():
    x = rows(11, 4, 2)
    plain = dp_jax.gather(dp_jax.scatter({"b": x, "a": x}, devices(2)), 0)
    ordered = dp_jax.gather(dp_jax.scatter(collections.OrderedDict(b=x, a=x), devices(2)), 0)
    assert list(plain) == ["a", "b"] and list(ordered) == ["b", "a"]


def test_defaultdict_is_scattered_where_torch_raises_and_tuple_subclasses_are_shared():
    class Shape(tuple):  # not a namedtuple: a JAX leaf
        pass

    x, shape = rows(12, 4, 2), Shape((4, 2))
    chunks = dp_jax.scatter((collections.defaultdict(list, x=x), shape), devices(2))
    assert type(chunks[0][0]) is collections.defaultdict and chunks[0][0]["x"].shape == (2, 2)
    assert all(chunk[1] is shape for chunk in chunks)


def test_negative_dim_splits_the_last_axis_of_each_leaf():
    a, b = rows(6, 2, 9), rows(7, 3, 4, 9)
    chunks = dp_jax.scatter((a, b), devices(4), dim=-1)
    assert [c[0].shape for c in chunks] == [(2, 3)] * 3
    assert [c[1].shape for c in chunks] == [(3, 4, 3)] * 3


def test_scatter_without_arrays_gives_one_shared_entry_per_device_like_torch(stock):
    ours = dp_jax.scatter(("text", 3), devices(4))
    assert ours == stock.scatter(("text", 3), stock.devices(4))


def test_scatter_and_gather_leave_user_arrays_usable_and_unchanged():
    x = jnp.asarray(rows(8, 9, 2))
    expected = np.asarray(x).copy()
    dp_jax.gather(dp_jax.scatter(x, devices(4)), 0)
    assert not x.is_deleted()
    np.testing.assert_array_equal(np.asarray(x), expected)


@pytest.mark.parametrize("target", [3, "device", "cpu"])
def test_gathered_output_is_committed_to_the_target(target):
    device = {3: devices(4)[3], "device": devices(3)[2], "cpu": jax.devices("cpu")[0]}[target]
    target_arg = device if target == "device" else target
    out = dp_jax.gather(dp_jax.scatter({"y": rows(9, 5, 2)}, devices(4)), target_arg)
    assert_committed_to(out, device)


def test_gradient_through_scatter_and_gather_reaches_the_input_on_its_device():
    x = jax.device_put(rows(10, 5, 3), devices(3)[2])

    def loss(x):
        return jnp.sum(dp_jax.gather(dp_jax.scatter(x, devices(4)), devices(4)[1]) ** 3)

    grad = jax.grad(loss)(x)
    assert grad.devices() == {devices(3)[2]}
    np.testing.assert_allclose(np.asarray(grad), 3 * np.asarray(x) ** 2, rtol=1e-6)


# --- scatter_kwargs: torch's padding ------------------------------------------------------------


KWARGS_CASES = {
    "args_only": ((rows(0, 8, 2),), {}),
    "kwargs_only": ((), {"x": rows(1, 8, 2)}),
    "both_batch_6": ((rows(2, 6, 2), "tag"), {"mask": rows(3, 6)}),
    "small_batch_with_a_float_kwarg_pads_args_with_empty_tuples": ((rows(4, 2, 2),), {"scale": 2.0}),
    "three_float_args_pad_kwargs_with_empty_dicts": ((1.0, 2.0, 3.0), {"x": rows(5, 2, 2)}),
    "nothing": ((), {}),
}


@pytest.mark.parametrize("case", sorted(KWARGS_CASES))
def test_scatter_kwargs_pads_like_stock_torch(stock, case):
    args, kwargs = KWARGS_CASES[case]
    torch_args = tuple(torch.from_numpy(a) if isinstance(a, np.ndarray) else a for a in args)
    torch_kwargs = {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
    expected_args, expected_kwargs = stock.scatter_kwargs(torch_args, torch_kwargs, stock.devices(4))
    ours_args, ours_kwargs = dp_jax.scatter_kwargs(args, kwargs, devices(4))

    def shapes(tree):
        return [tuple(x.shape) if hasattr(x, "shape") else x for x in jax.tree_util.tree_leaves(tree)]

    assert [shapes(a) for a in ours_args] == [shapes(tuple(a)) for a in expected_args]
    assert [sorted(k) for k in ours_kwargs] == [sorted(k) for k in expected_kwargs]
    assert [shapes(k) for k in ours_kwargs] == [shapes(dict(k)) for k in expected_kwargs]


def test_scatter_kwargs_refuses_where_torch_returns_fewer_kwargs_than_args(stock):
    args, kwargs = (1.0, 2.0), {"x": rows(6, 2, 2)}
    torch_kwargs = {"x": torch.from_numpy(kwargs["x"])}
    torch_args, torch_kwargs = stock.scatter_kwargs(args, torch_kwargs, stock.devices(4))
    assert (len(torch_args), len(torch_kwargs)) == (4, 2)  # torch's parallel_apply then asserts
    with pytest.raises(ValueError, match=r"kwargs split into 2 chunks .* shared by all 4 devices"):
        dp_jax.scatter_kwargs(args, kwargs, devices(4))


def test_scatter_kwargs_refuses_args_and_kwargs_of_different_batch():
    with pytest.raises(ValueError, match=r"leaf kwargs\['mask'\] has batch 8 but args\[0\] has 5"):
        dp_jax.scatter_kwargs((rows(0, 5, 2),), {"mask": rows(1, 8)}, devices(4))


# --- bad input ----------------------------------------------------------------------------------


def test_scatter_with_no_devices_says_pass_at_least_one():
    with pytest.raises(ValueError, match=r"devices is empty; pass at least one device"):
        dp_jax.scatter(rows(0, 4, 2), [])


def test_scatter_with_a_device_index_out_of_range_names_it_and_the_range():
    with pytest.raises(ValueError, match=r"devices\[1\]=99 is out of range: jax.devices\(\) has 8 devices"):
        dp_jax.scatter(rows(0, 4, 2), [0, 99])


def test_scatter_with_a_single_device_instead_of_a_list_says_pass_a_list():
    with pytest.raises(TypeError, match=r"must be a list of devices"):
        dp_jax.scatter(rows(0, 4, 2), devices(1)[0])


def test_leaves_of_different_batch_are_refused_where_torch_truncates(stock):
    x, y = rows(0, 5, 2), rows(1, 8, 2)
    torch_chunks = stock.scatter((torch.from_numpy(x), torch.from_numpy(y)), stock.devices(4))
    assert sum(len(chunk[1]) for chunk in torch_chunks) == 6  # y lost 2 of its 8 rows, silently
    with pytest.raises(ValueError, match=r"leaf inputs\[1\]\['mask'\] has batch 8 but inputs\[0\] has 5"):
        dp_jax.scatter((x, {"mask": y}), devices(4))


def test_a_0_dim_leaf_cannot_be_scattered():
    with pytest.raises(ValueError, match=r"leaf inputs\['t'\] is 0-dim .* cannot be split along dim 0"):
        dp_jax.scatter({"x": rows(0, 4, 2), "t": jnp.float32(0.5)}, devices(2))


def test_scatter_dim_out_of_range_names_the_leaf_shape_and_valid_range():
    message = r"dim=2 is out of range for inputs\[0\] with shape \(4, 2\); pass dim in \[-2, 1\]"
    with pytest.raises(ValueError, match=message):
        dp_jax.scatter([rows(0, 4, 2)], devices(2), dim=2)


# --- gather -------------------------------------------------------------------------------------


def test_gather_of_scalars_along_dim_0_warns_like_torch_and_returns_one_value_per_replica(stock):
    with pytest.warns(UserWarning) as torch_record:
        stock.gather([torch.tensor(1.0), torch.tensor(2.0), torch.tensor(3.0)], 0)
    with pytest.warns(UserWarning) as our_record:
        out = dp_jax.gather([jnp.float32(1.0), jnp.float32(2.0), jnp.float32(3.0)], 0)
    assert str(our_record[0].message) == str(torch_record[0].message)
    np.testing.assert_array_equal(np.asarray(out), [1.0, 2.0, 3.0])


def test_gather_of_scalars_along_dim_minus_1_is_an_error():
    with pytest.raises(ValueError, match=r"scalars and dim=-1; scalars can only be gathered along dim=0"):
        dp_jax.gather([jnp.float32(1.0), jnp.float32(2.0)], 0, dim=-1)


def test_gather_of_all_none_is_none_and_nested_none_is_kept():
    assert dp_jax.gather([None, None], 0) is None
    out = dp_jax.gather([{"a": rows(0, 2, 2), "b": None}, {"a": rows(1, 1, 2), "b": None}], 0)
    assert out["b"] is None and out["a"].shape == (3, 2)


def test_gather_rebuilds_namedtuples_and_concatenates_along_dim_1():
    outs = [Pair(rows(0, 2, 3), [rows(1, 2, 1)]), Pair(rows(2, 2, 2), [rows(3, 2, 4)])]
    out = dp_jax.gather(outs, 0, dim=1)
    assert type(out) is Pair and out.left.shape == (2, 5) and out.right[0].shape == (2, 5)


def test_gather_of_outputs_with_different_dict_keys_names_the_missing_key():
    with pytest.raises(ValueError, match=r"outputs\[1\] has structure .* lacks \[\"\['logits'\]\"\]"):
        dp_jax.gather([{"logits": rows(0, 2, 2)}, {"probs": rows(1, 2, 2)}], 0)


def test_gather_refuses_a_none_output_beside_arrays_where_torch_returns_none(stock):
    assert stock.gather([None, torch.ones(2)], 0) is None
    with pytest.raises(ValueError, match=r"outputs\[1\] has structure"):
        dp_jax.gather([None, jnp.ones(2)], 0)


def test_gather_of_shapes_differing_outside_dim_names_both_shapes():
    message = r"outputs\[1\]\['h'\] has shape \(2, 4\) but outputs\[0\]\['h'\] has \(2, 3\)"
    with pytest.raises(ValueError, match=message):
        dp_jax.gather([{"h": rows(0, 2, 3)}, {"h": rows(1, 2, 4)}], 0)


def test_gather_of_different_ranks_is_an_error():
    with pytest.raises(ValueError, match=r"outputs\[1\] has shape \(2,\) but outputs\[0\] has \(2, 3\)"):
        dp_jax.gather([rows(0, 2, 3), rows(1, 2)], 0)


def test_gather_of_different_dtypes_is_an_error():
    with pytest.raises(TypeError, match=r"outputs\[1\] has dtype int32 but outputs\[0\] has float32"):
        dp_jax.gather([rows(0, 2), np.arange(2, dtype=np.int32)], 0)


def test_gather_refuses_string_leaves_where_torch_returns_a_map_object(stock):
    assert stock.gather(["ab", "cd"], 0).startswith("<map object")
    with pytest.raises(TypeError, match=r"outputs\[0\] is a str \('ab'\), not an array"):
        dp_jax.gather(["ab", "cd"], 0)


@pytest.mark.parametrize("value", [3, 1.5, True])
def test_gather_refuses_python_numbers_where_torch_fails_with_not_iterable(value):
    with pytest.raises(TypeError, match=rf"outputs\[0\]\['n'\] is a {type(value).__name__} .* not an array"):
        dp_jax.gather([{"n": value}, {"n": value}], 0)


def test_gather_of_no_outputs_is_an_error():
    with pytest.raises(ValueError, match=r"outputs is empty"):
        dp_jax.gather([], 0)


def test_gather_to_an_unknown_target_names_the_argument():
    with pytest.raises(TypeError, match=r"target_device='gpu:0' is not a device"):
        dp_jax.gather([rows(0, 2)], "gpu:0")
    with pytest.raises(ValueError, match=r"target_device=8 is out of range"):
        dp_jax.gather([rows(0, 2)], 8)


def test_gather_along_an_out_of_range_dim_is_an_error():
    with pytest.raises(ValueError, match=r"dim=3 is out of range for outputs\[0\] with shape \(2, 2\)"):
        dp_jax.gather([rows(0, 2, 2), rows(1, 2, 2)], 0, dim=3)


def test_no_warning_when_gathering_vectors():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dp_jax.gather([rows(0, 2), rows(1, 1)], 0)

