"""torch <-> Flax NNX state: every layer kind a derived linen mapping handles (a torch MultiheadAttention's
out_proj with it: the attention rule owns it), built into an abstract state, bitwise both ways, a wrong shape
named by its path."""
from __future__ import annotations

import jax
import numpy as np
import pytest
import torch
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from comparisons.convert import ConversionError, nnx_to_torch, torch_to_nnx


class TorchZoo(torch.nn.Module):
    def __init__(self, width: int, heads: int, channels: int, vocab: int):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Linear(width, width), torch.nn.Linear(width, width, bias=False)])
        self.conv = torch.nn.Conv2d(channels, width, 3)
        self.bn = torch.nn.BatchNorm2d(width)
        self.ln, self.rms = torch.nn.LayerNorm(width), torch.nn.RMSNorm(width)
        self.embed = torch.nn.Embedding(vocab, width)
        self.lstm = torch.nn.LSTM(width, channels, batch_first=True)
        self.head = torch.nn.Linear(width, vocab)
        self.attn = torch.nn.MultiheadAttention(width, heads, batch_first=True)


class NNXZoo(nnx.Module):
    def __init__(self, width: int, heads: int, channels: int, vocab: int, *, rngs: nnx.Rngs):
        self.layers = nnx.List([nnx.Linear(width, width, rngs=rngs), nnx.Linear(width, width, use_bias=False,
                                                                                 rngs=rngs)])
        self.conv = nnx.Conv(channels, width, (3, 3), padding="VALID", rngs=rngs)
        self.bn = nnx.BatchNorm(width, rngs=rngs)
        self.ln, self.rms = nnx.LayerNorm(width, rngs=rngs), nnx.RMSNorm(width, rngs=rngs)
        self.embed = nnx.Embed(vocab, width, rngs=rngs)
        self.lstm = nnx.LSTMCell(width, channels, rngs=rngs)
        self.head = nnx.Linear(width, vocab, rngs=rngs)
        self.attn = nnx.MultiHeadAttention(num_heads=heads, in_features=width, decode=False, rngs=rngs)


sizes = st.fixed_dictionaries({"heads": st.integers(1, 3), "head_dim": st.integers(1, 4),
                               "channels": st.integers(1, 4), "vocab": st.integers(2, 9)})


def _zoo(size, seed):
    width = size["heads"] * size["head_dim"]
    args = (width, size["heads"], size["channels"], size["vocab"])
    torch.manual_seed(seed)
    zoo = TorchZoo(*args)
    with torch.no_grad():  # running statistics and an LSTM bias_hh of zeros (Flax keeps one bias per gate)
        zoo.bn.running_mean.normal_()
        zoo.bn.running_var.uniform_(0.5, 2.0)
        zoo.lstm.bias_hh_l0.zero_()
    return zoo, nnx.eval_shape(lambda: NNXZoo(*args, rngs=nnx.Rngs(0)))


@settings(max_examples=6, deadline=None)
@given(size=sizes, seed=st.integers(0, 2**16), dtype=st.sampled_from([torch.float32, torch.float64]))
def test_torch_to_nnx_to_torch_is_bitwise_for_every_layer_kind(size, seed, dtype):
    torch_module, abstract = _zoo(size, seed)
    torch_module = torch_module.to(dtype)
    with jax.enable_x64(dtype == torch.float64):
        state = torch_to_nnx(torch_module, abstract)
        model = nnx.merge(nnx.graphdef(abstract), nnx.state(abstract, nnx.Not(nnx.Any(nnx.Param, nnx.BatchStat))),
                          state)
        assert model.embed.embedding.shape == (size["vocab"], size["heads"] * size["head_dim"])
        np.testing.assert_array_equal(model.layers[0].kernel[...], torch_module.layers[0].weight.detach().numpy().T)
        np.testing.assert_array_equal(model.bn.mean[...], torch_module.bn.running_mean.numpy())
        out = torch_module.attn.out_proj.weight.detach().numpy()  # (E, E) -> NNX's (heads, head_dim, E)
        np.testing.assert_array_equal(model.attn.out.kernel[...], out.T.reshape(size["heads"], size["head_dim"], -1))
        back = nnx_to_torch(model, torch_module)
    expected = torch_module.state_dict()
    assert set(back) == set(expected)
    for name, tensor in expected.items():
        assert back[name].dtype == tensor.dtype, name
        torch.testing.assert_close(back[name], tensor, rtol=0, atol=0, msg=name)


def test_a_shape_the_nnx_twin_does_not_have_is_named_by_its_path():
    torch_module, _ = _zoo({"heads": 2, "head_dim": 2, "channels": 3, "vocab": 5}, 0)
    wrong = nnx.eval_shape(lambda: NNXZoo(4, 2, 3, 6, rngs=nnx.Rngs(0)))  # vocab 6, torch's 5
    with pytest.raises(ConversionError, match=r"params\.embed\.embedding.* has shape \(5, 4\).*expects \(6, 4\)"):
        torch_to_nnx(torch_module, wrong)
