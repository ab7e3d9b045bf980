"""Each layer kind: converted weights compute the same output, and round trips are bitwise."""
import jax
import numpy as np
import pytest
import torch
from _helpers_convert import layer_case, torch_layout_to_flax
from _helpers_models import assert_agree
from hypothesis import given, settings
from hypothesis import strategies as st

from comparisons.convert import Layer, flax_grads_to_torch, flax_to_torch, torch_grads_to_flax, torch_to_flax

KINDS = ["linear", "conv1d", "conv2d", "batchnorm", "layernorm", "embedding", "mha", "lstm"]


def torch_forward(kind, layer, x):
    layer.eval()
    with torch.no_grad():
        if kind == "mha":
            return layer(x, x, x, need_weights=False)[0]
        return layer(x)[0] if kind == "lstm" else layer(x)


def make_input(kind, shape, seed, dtype):
    rng = np.random.default_rng(seed + 100)
    if shape is None:  # embedding: token ids
        return rng.integers(0, 5, (4, 3)).astype(np.int32)
    return rng.standard_normal(shape).astype(dtype)


def subtree(variables, path):
    for name in path.split("/"):
        variables = variables[name]
    return variables


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("kind", KINDS)
def test_converted_layer_gives_the_same_output_in_flax(kind, seed):
    module, flax_layer, entry, shape = layer_case(kind, seed)
    x = make_input(kind, shape, seed, np.float32)
    flax_x = torch_layout_to_flax(kind, x)
    init = jax.eval_shape(lambda: flax_layer.init(jax.random.key(0), flax_x))
    wrapped = {c: {"outer": {"blk": tree}} for c, tree in init.items()}
    variables = torch_to_flax(module.state_dict(), [entry], like=wrapped)  # also checks the layout
    inner = {c: subtree(tree, "outer/blk") for c, tree in variables.items()}
    expected = torch_forward(kind, module["blk"], torch.from_numpy(x)).numpy()
    assert_agree(torch_layout_to_flax(kind, expected), flax_layer.apply(inner, flax_x), np.float32, kind)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kind", KINDS)
def test_torch_to_flax_to_torch_is_bitwise(kind, dtype):
    module, _, entry, _ = layer_case(kind, seed=3 if dtype == torch.float32 else 4)
    state = module.to(dtype).state_dict()
    back = flax_to_torch(torch_to_flax(state, [entry]), [entry], like=state)
    assert back.keys() == state.keys()
    if kind == "lstm":  # Flax has one bias per gate: the sum survives, the split does not
        summed = lambda s: s["blk.bias_ih_l0"] + s["blk.bias_hh_l0"]  # noqa: E731
        assert torch.equal(summed(back), summed(state))
        state = {k: v for k, v in state.items() if "bias" not in k}
    for key, value in state.items():
        assert back[key].dtype == value.dtype and torch.equal(back[key], value), key


@pytest.mark.parametrize("kind", KINDS)
def test_flax_to_torch_to_flax_is_bitwise(kind):
    module, _, entry, _ = layer_case(kind, seed=5)
    shapes = torch_to_flax(module.state_dict(), [entry])
    rng = np.random.default_rng(6)
    variables = jax.tree_util.tree_map(lambda a: rng.standard_normal(a.shape), shapes)
    back = torch_to_flax(flax_to_torch(variables, [entry]), [entry])
    assert jax.tree_util.tree_structure(back) == jax.tree_util.tree_structure(variables)
    for a, b in zip(jax.tree_util.tree_leaves(back), jax.tree_util.tree_leaves(variables)):
        assert a.dtype == b.dtype and np.array_equal(a, b)


@pytest.mark.parametrize("kind", ["linear", "mha", "lstm", "batchnorm"])
def test_gradient_conversion_round_trips_and_skips_buffers(kind):
    module, _, entry, _ = layer_case(kind, seed=7)
    rng = np.random.default_rng(8)
    grads = {n: torch.from_numpy(rng.standard_normal(tuple(p.shape))) for n, p in module.named_parameters()}
    flax_grads = torch_grads_to_flax(grads, [entry])
    assert "batch_stats" not in flax_grads
    back = flax_grads_to_torch(flax_grads, [entry])
    if kind == "lstm":  # torch's two biases get the same gradient, that of Flax's single bias
        assert torch.equal(back["blk.bias_hh_l0"], back["blk.bias_ih_l0"])
        grads["blk.bias_hh_l0"] = grads["blk.bias_ih_l0"]
    assert back.keys() == grads.keys()
    assert all(torch.equal(back[k], grads[k]) for k in grads)


def test_conversion_copies_so_flax_leaves_do_not_alias_torch_parameters():
    module, _, entry, _ = layer_case("linear", seed=9)
    variables = torch_to_flax(module.state_dict(), [entry])
    before = variables["params"]["outer"]["blk"]["kernel"].copy()
    with torch.no_grad():
        module["blk"].weight.add_(1.0)
    assert np.array_equal(variables["params"]["outer"]["blk"]["kernel"], before)
    assert variables["params"]["outer"]["blk"]["kernel"].flags.c_contiguous


@settings(max_examples=25, deadline=None)
@given(spatial=st.lists(st.integers(1, 4), min_size=1, max_size=3), cin=st.integers(1, 4),
       cout=st.integers(1, 4), double=st.booleans(), seed=st.integers(0, 2**16))
def test_conv_kernel_layout_is_spatial_in_out_and_round_trips(spatial, cin, cout, double, seed):
    rng = np.random.default_rng(seed)
    weight = rng.standard_normal((cout, cin, *spatial)).astype(np.float64 if double else np.float32)
    entry = [Layer("conv", "c", "net/c")]
    kernel = torch_to_flax({"c.weight": weight}, entry)["params"]["net"]["c"]["kernel"]
    o, i, *where = (int(rng.integers(0, n)) for n in weight.shape)
    assert kernel.shape == (*spatial, cin, cout) and kernel[(*where, i, o)] == weight[(o, i, *where)]
    back = flax_to_torch({"params": {"net": {"c": {"kernel": kernel}}}}, entry)["c.weight"]
    assert back.numpy().dtype == weight.dtype and np.array_equal(back.numpy(), weight)


@settings(max_examples=25, deadline=None)
@given(heads=st.integers(1, 4), head_dim=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_attention_heads_split_the_packed_rows_in_order(heads, head_dim, seed):
    rng = np.random.default_rng(seed)
    e = heads * head_dim
    state = {"in_proj_weight": rng.standard_normal((3 * e, e)), "in_proj_bias": rng.standard_normal(3 * e),
             "out_proj.weight": rng.standard_normal((e, e)), "out_proj.bias": rng.standard_normal(e)}
    entry = [Layer("mha", "", "attn", num_heads=heads)]
    params = torch_to_flax(state, entry)["params"]["attn"]
    h, d, j = (int(rng.integers(0, n)) for n in (heads, head_dim, e))
    for block, name in enumerate(("query", "key", "value")):  # torch packs rows as [q; k; v]
        row = block * e + h * head_dim + d
        assert params[name]["kernel"][j, h, d] == state["in_proj_weight"][row, j]
        assert params[name]["bias"][h, d] == state["in_proj_bias"][row]
    assert params["out"]["kernel"][h, d, j] == state["out_proj.weight"][j, h * head_dim + d]
    back = flax_to_torch({"params": {"attn": params}}, entry)
    assert all(np.array_equal(back[k].numpy(), v) for k, v in state.items())
