"""A Conv weight tied under two torch names converts once, like a tied Linear: the second layer owns its bias."""
from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp
import numpy as np
import torch
from _twins import mse_jax, mse_torch

from comparisons import compare
from comparisons.models import pair_from_modules, tied_parameters


class TorchTiedConv(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.conv2.weight = self.conv1.weight

    def forward(self, x):
        return self.conv2(torch.tanh(self.conv1(x))).mean(dim=(2, 3))


class _Bias(nn.Module):
    features: int

    @nn.compact
    def __call__(self, x):
        return x + self.param("bias", nn.initializers.zeros, (self.features,))


class FlaxTiedConv(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool = False):
        conv1 = nn.Conv(4, (3, 3), padding=1, name="conv1")
        h = jnp.tanh(conv1(jnp.transpose(x, (0, 2, 3, 1))))
        shared = nn.Conv(4, (3, 3), padding=1, use_bias=False, parent=None)
        h = shared.apply({"params": {"kernel": conv1.variables["params"]["kernel"]}}, h)
        return _Bias(4, name="conv2")(h).mean(axis=(1, 2))


def images(batch_size, seed, dtype):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch_size, 4, 5, 5)).astype(dtype)
    return (x,), rng.standard_normal((batch_size, 4)).astype(dtype)


def test_a_tied_conv_weight_converts_once_and_the_twin_passes():
    seed = int(np.random.default_rng().integers(1000))
    torch.manual_seed(seed)
    torch_model = TorchTiedConv()
    assert tied_parameters(torch_model) == (("conv2.weight", "conv1.weight"),)
    pair = pair_from_modules("tied_conv", torch_model, FlaxTiedConv(), make_inputs=images, loss_torch=mse_torch,
                             loss_jax=mse_jax)
    assert {layer.torch: layer.kind for layer in pair.mapping} == {"conv1": "conv", "conv2": "tied_bias"}
    report = compare(pair, batch_size=5, devices=2, strategies=["explicit"], steps=2, torch_devices="cpu", seed=seed)
    assert report.ok, report.render("markdown")
