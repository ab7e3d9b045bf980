"""torch's nn.MultiheadAttention beside nnx.MultiHeadAttention: the float64 run is float64 throughout (NNX's default
attention computes its softmax in float32 through jax.nn.dot_product_attention), an honest twin passes every strategy
under compare()'s defaults, and a planted attention scale fails naming the leaf."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from comparisons import compare
from comparisons.models import pair_from_modules
from comparisons.models.jax_nnx import nnx_apply

SEED = int(np.random.default_rng().integers(0, 1000))
WIDTH, HEADS, LENGTH = 8, 2, 5


class TorchAttention(torch.nn.Module):
    def __init__(self, width: int = WIDTH, heads: int = HEADS):
        super().__init__()
        self.attn = torch.nn.MultiheadAttention(width, heads, batch_first=True)

    def forward(self, x):
        return self.attn(x, x, x, need_weights=False)[0]


class NNXAttention(nnx.Module):
    def __init__(self, width: int = WIDTH, heads: int = HEADS, *, attention_fn=nnx.dot_product_attention,
                 rngs: nnx.Rngs):
        self.attn = nnx.MultiHeadAttention(num_heads=heads, in_features=width, decode=False,
                                           attention_fn=attention_fn, rngs=rngs)

    def __call__(self, x):
        return self.attn(x)


def inputs(batch_size, seed, dtype):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((batch_size, LENGTH, WIDTH)).astype(dtype),), \
        rng.standard_normal((batch_size, LENGTH, WIDTH)).astype(dtype)


def attention_pair(seed: int, width: int = WIDTH, heads: int = HEADS, attention_fn=nnx.dot_product_attention):
    torch.manual_seed(seed)
    return pair_from_modules("mha_nnx", TorchAttention(width, heads),
                             NNXAttention(width, heads, attention_fn=attention_fn, rngs=nnx.Rngs(seed)),
                             make_inputs=inputs, loss_torch=lambda y, t: torch.mean((y - torch.as_tensor(t)) ** 2),
                             loss_jax=lambda y, t: jnp.mean((y - t) ** 2))


@given(seed=st.integers(0, 10_000), heads=st.sampled_from([1, 2, 4]))
@settings(max_examples=4, deadline=None)
def test_the_float64_attention_is_float64_in_every_step_and_matches_torch(seed, heads):
    """Before: the float64 copy called jax.nn.dot_product_attention, whose softmax is float32 (|Δ| ~1e-8)."""
    pair = attention_pair(seed, heads=heads)
    torch_module, flax_model, variables = pair.build(seed=seed, dtype=np.float64)
    (x,), _ = inputs(3, seed, np.float64)
    model64 = pair.jax_side.computing_in(flax_model, "float64")
    with jax.enable_x64(True):
        jaxpr = jax.make_jaxpr(lambda v, x: model64.apply(v, x))(variables, x)
        dtypes = {str(var.aval.dtype) for eqn in jaxpr.eqns for var in eqn.outvars}
        assert "float32" not in dtypes, dtypes
        ours = np.asarray(model64.apply(variables, x))
    theirs = torch_module(torch.as_tensor(x)).detach().numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-14)


def test_the_users_module_keeps_its_attention_function():
    model = NNXAttention(rngs=nnx.Rngs(0))
    nnx_apply(model).with_dtype("float64")
    assert model.attn.attention_fn is nnx.dot_product_attention


@pytest.mark.slow
def test_an_honest_multihead_attention_twin_passes_every_strategy():
    report = compare(attention_pair(SEED), batch_size=7, devices=4, seed=SEED, torch_devices="cpu")
    assert report.ok, report.render("markdown")
    assert len(report.strategies) >= 3


def _scaled_by_width(query, key, value, **kwargs):
    """A port mistake: scores scaled by 1/sqrt(width), not torch's 1/sqrt(head_dim)."""
    return nnx.dot_product_attention(query * np.sqrt(HEADS) ** -1, key, value, **kwargs)


def test_an_attention_scale_unlike_torchs_fails_naming_the_query_kernel():
    report = compare(attention_pair(SEED, attention_fn=_scaled_by_width), batch_size=7, devices=4, seed=SEED,
                     strategies=["explicit"], torch_devices="cpu")
    gradients = next(c for c in report.checks if c.subject == "gradients" and c.compared.startswith("torch DP vs jax"))
    failing = {leaf.path: leaf for leaf in gradients.leaves if not leaf.passed}
    assert not gradients.passed and "attn.query.kernel" in failing, gradients.detail
    assert failing["attn.query.kernel"].cause == "port"
    assert "`attn.query.kernel`" in failing["attn.query.kernel"].message


