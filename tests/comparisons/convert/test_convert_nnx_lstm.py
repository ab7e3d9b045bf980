"""torch nn.LSTM (one layer, batch first) <-> nnx.RNN(nnx.OptimizedLSTMCell), whose dense_i / dense_h fuse the
four gates: the derived mapping names the kind "lstm_fused" at the cell; the converted twin computes torch's
states; torch -> NNX -> torch and NNX -> torch -> NNX are bitwise; gradients convert as the gradients NNX takes."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from comparisons.convert import ConversionError, Layer, nnx_to_torch, torch_grads_to_flax, torch_to_nnx
from comparisons.models import derive_mapping


class TorchLSTM(torch.nn.Module):
    def __init__(self, features: int, hidden: int):
        super().__init__()
        self.lstm = torch.nn.LSTM(features, hidden, batch_first=True)

    def forward(self, x):
        return self.lstm(x)[0]


class NNXLSTM(nnx.Module):
    def __init__(self, features: int, hidden: int, *, rngs: nnx.Rngs, dtype=jnp.float32):
        self.lstm = nnx.RNN(nnx.OptimizedLSTMCell(features, hidden, param_dtype=dtype, rngs=rngs))

    def __call__(self, x):
        return self.lstm(x)


def _random_torch(features: int, hidden: int, seed: int, dtype: torch.dtype) -> TorchLSTM:
    torch.manual_seed(seed)
    module = TorchLSTM(features, hidden).to(dtype)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.normal_()
    return module


def _loaded(state, features: int, hidden: int, dtype=jnp.float32) -> NNXLSTM:
    model = NNXLSTM(features, hidden, rngs=nnx.Rngs(0), dtype=dtype)
    nnx.update(model, state)
    return model


sizes = st.fixed_dictionaries({"features": st.integers(1, 6), "hidden": st.integers(1, 7),
                               "length": st.integers(1, 5), "seed": st.integers(0, 2**16)})


@settings(max_examples=4, deadline=None)
@given(size=sizes, dtype=st.sampled_from([torch.float32, torch.float64]))
def test_torch_lstm_converts_to_an_nnx_optimized_cell_computing_its_states_and_back_bitwise(size, dtype):
    features, hidden = size["features"], size["hidden"]
    torch_module = _random_torch(features, hidden, size["seed"], dtype)
    x = np.random.default_rng(size["seed"]).standard_normal((2, size["length"], features))
    wide = dtype == torch.float64
    with jax.enable_x64(wide):  # the cell's carry starts in its param_dtype: float64 built so
        nnx_dtype = jnp.float64 if wide else jnp.float32
        abstract = nnx.eval_shape(lambda: NNXLSTM(features, hidden, rngs=nnx.Rngs(0), dtype=nnx_dtype))
        model = _loaded(torch_to_nnx(torch_module, abstract), features, hidden, nnx_dtype)
        w_ih = torch_module.lstm.weight_ih_l0.detach().numpy()
        np.testing.assert_array_equal(model.lstm.cell.dense_i.kernel[...], w_ih.T)
        states = np.asarray(model(jnp.asarray(x, nnx_dtype)))
        back = nnx_to_torch(model, torch_module)
    expected = torch_module(torch.from_numpy(x).to(dtype)).detach().numpy()
    np.testing.assert_allclose(states, expected, **({"atol": 2e-5} if dtype == torch.float32 else {"atol": 1e-12}))
    # torch's two biases come back as their sum and zeros: bitwise once bias_hh is zero (the documented exception)
    lstm = torch_module.lstm
    summed = {**torch_module.state_dict(), "lstm.bias_ih_l0": lstm.bias_ih_l0 + lstm.bias_hh_l0,
              "lstm.bias_hh_l0": torch.zeros_like(lstm.bias_hh_l0)}
    assert set(back) == set(summed)
    for name, tensor in summed.items():
        assert back[name].dtype == tensor.dtype, name
        torch.testing.assert_close(back[name], tensor.detach(), rtol=0, atol=0, msg=name)


@settings(max_examples=3, deadline=None)
@given(size=sizes)
def test_an_nnx_optimized_lstm_goes_to_torch_and_back_bitwise(size):
    features, hidden = size["features"], size["hidden"]
    model = NNXLSTM(features, hidden, rngs=nnx.Rngs(size["seed"]))
    model.lstm.cell.dense_h.bias[...] = jax.random.normal(jax.random.key(size["seed"]), (4 * hidden,))
    torch_module = TorchLSTM(features, hidden)
    torch_module.load_state_dict(nnx_to_torch(model, torch_module))
    again = nnx.to_flat_state(torch_to_nnx(torch_module, model))
    original = dict(nnx.to_flat_state(nnx.state(model, nnx.Param)))
    assert {path for path, _ in again} == set(original)
    for path, variable in again:
        np.testing.assert_array_equal(variable.get_value(), original[path].get_value(), err_msg=str(path))


def test_the_derived_mapping_converts_gradients_as_nnx_takes_them():
    features, hidden, seed = (int(v) for v in np.random.default_rng().integers(2, 6, 3))
    torch_module = _random_torch(features, hidden, seed, torch.float32)
    abstract = nnx.eval_shape(lambda: NNXLSTM(features, hidden, rngs=nnx.Rngs(0)))
    layers, _ = derive_mapping(torch_module, {"params": nnx.to_pure_dict(nnx.state(abstract, nnx.Param))})
    assert layers == [Layer("lstm_fused", "lstm", "lstm/cell")]
    x = np.random.default_rng(seed).standard_normal((3, 4, features)).astype(np.float32)
    weights = np.random.default_rng(seed + 1).standard_normal((3, 4, hidden)).astype(np.float32)
    (torch_module(torch.from_numpy(x)) * torch.from_numpy(weights)).sum().backward()
    torch_grads = torch_grads_to_flax({n: p.grad for n, p in torch_module.named_parameters()}, layers)
    model = _loaded(torch_to_nnx(torch_module, abstract), features, hidden)
    grads = nnx.grad(lambda m: (m(jnp.asarray(x)) * weights).sum())(model)
    for path, variable in nnx.to_flat_state(grads):
        expected = torch_grads[path[0]][path[1]][path[2]][path[3]]
        np.testing.assert_allclose(variable.get_value(), expected, rtol=1e-4, atol=1e-5, err_msg=str(path))


def test_a_cell_of_the_wrong_hidden_size_is_named_by_its_path():
    torch_module = _random_torch(3, 4, 0, torch.float32)
    wrong = nnx.eval_shape(lambda: NNXLSTM(3, 5, rngs=nnx.Rngs(0)))
    named = r"params\.lstm\.cell\.dense_i\.kernel.* has shape \(3, 16\).*expects \(3, 20\)"
    with pytest.raises(ConversionError, match=named):
        torch_to_nnx(torch_module, wrong)
