"""torch.nn.RMSNorm converts by a built-in rule to Flax's nn.RMSNorm (its weight is Flax's scale) (issue 36)."""
from __future__ import annotations

import numpy as np
import torch
from flax import linen as nn
from hypothesis import given, settings
from hypothesis import strategies as st

from comparisons import compare
from comparisons.models import pair_from_modules


class FlaxNormed(nn.Module):
    width: int

    @nn.compact
    def __call__(self, x, train: bool = False):
        return nn.Dense(3, name="head")(nn.RMSNorm(epsilon=1e-6, name="norm")(nn.Dense(self.width, name="fc")(x)))


def features(batch_size, seed, dtype):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((batch_size, 4)).astype(dtype),), rng.standard_normal((batch_size, 3)).astype(dtype)


def square_torch(output, targets):
    return ((output - targets) ** 2).mean()


def square_jax(output, targets):
    return ((output - targets) ** 2).mean()


@settings(max_examples=2, deadline=None)
@given(width=st.integers(2, 9), seed=st.integers(0, 2**16))
def test_rmsnorm_converts_to_flax_scale_and_the_pair_trains_alike(width, seed):
    torch.manual_seed(seed)
    norm = torch.nn.RMSNorm(width, eps=1e-6)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)  # not the ones both sides start from
    torch_net = torch.nn.Sequential()
    torch_net.add_module("fc", torch.nn.Linear(4, width))
    torch_net.add_module("norm", norm)
    torch_net.add_module("head", torch.nn.Linear(width, 3))
    pair = pair_from_modules(f"rms_{width}", torch_net, FlaxNormed(width), make_inputs=features,
                             loss_torch=square_torch, loss_jax=square_jax)
    assert ("rmsnorm", "norm") in [(layer.kind, layer.torch) for layer in pair.mapping]
    _, _, variables = pair.build(seed=seed)
    np.testing.assert_array_equal(variables["params"]["norm"]["scale"], torch_net.norm.weight.detach().numpy())
    report = compare(pair, batch_size=5, devices=2, strategies=["explicit"], steps=1, torch_devices="cpu",
                     precision="off", seed=seed)
    assert report.ok, [check.detail for check in report.failures]
