"""The unused_parameters check judges each parameter, not its layer: an unused mask token beside a used
cls token (DINOv2's embeddings) must not make the used one fail, and a used twin must still be caught."""
from __future__ import annotations

import flax.linen as nn
import numpy as np
import pytest
import torch

from comparisons import compare
from comparisons.convert import Rule, register_rule
from comparisons.models import pair_from_modules
from comparisons.models.builtin import cross_entropy_jax, cross_entropy_torch


class TorchTokens(torch.nn.Module):
    """A layer holding two parameters itself; only `used` reaches the output."""

    def __init__(self, n):
        super().__init__()
        self.used = torch.nn.Parameter(torch.randn(n))
        self.spare = torch.nn.Parameter(torch.randn(n))

    def forward(self, x):
        return x + self.used


def _tokens_to_flax(t, layer, check):
    return {("params", "used"): t["used"], ("params", "spare"): t["spare"]}


def _tokens_to_torch(f, layer, check):
    return {"used": f[("params", "used")], "spare": f[("params", "spare")]}


register_rule("two_tokens", Rule(("used", "spare"), ("used", "spare"), (), _tokens_to_flax, _tokens_to_torch,
                                 flax_names={"used": "used", "spare": "spare"}),
              torch_types=[TorchTokens], replace=True)


class FlaxTokens(nn.Module):
    use_spare: bool = False

    @nn.compact
    def __call__(self, x, train: bool = False):
        used = self.param("used", nn.initializers.zeros, (x.shape[-1],))
        spare = self.param("spare", nn.initializers.zeros, (x.shape[-1],))
        return x + used + (spare if self.use_spare else 0.0)


class FlaxNet(nn.Module):
    use_spare: bool = False

    @nn.compact
    def __call__(self, x, train: bool = False):
        return nn.Dense(3, name="head")(FlaxTokens(self.use_spare, name="tokens")(x))


def features(batch_size, seed, dtype):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((batch_size, 4)).astype(dtype),), rng.integers(0, 3, batch_size).astype(np.int32)


def make_pair(use_spare):
    torch.manual_seed(int(use_spare))
    net = torch.nn.Sequential()
    net.add_module("tokens", TorchTokens(4))
    net.add_module("head", torch.nn.Linear(4, 3))
    return pair_from_modules(f"tokens_{use_spare}", net, FlaxNet(use_spare), make_inputs=features,
                             loss_torch=cross_entropy_torch, loss_jax=cross_entropy_jax)


def unused_checks(report):
    return [c for c in report.checks if c.subject == "unused_parameters"]


@pytest.mark.parametrize("seed", [0, 5])
def test_an_unused_parameter_beside_a_used_one_in_the_same_layer_passes(seed):
    report = compare(make_pair(False), batch_size=5, devices=2, strategies=["explicit"], steps=1,
                     torch_devices="cpu", seed=seed, precision="off")
    checks = unused_checks(report)
    assert checks and all(c.passed for c in checks), [c.detail for c in checks]
    assert "tokens.spare" in checks[0].detail and "tokens.used" not in checks[0].detail


def test_a_flax_twin_that_uses_the_parameter_torch_leaves_unused_still_fails_naming_it():
    report = compare(make_pair(True), batch_size=5, devices=2, strategies=["explicit"], steps=1,
                     torch_devices="cpu", precision="off")
    checks = unused_checks(report)
    assert checks and not checks[0].passed
    assert "tokens.spare" in checks[0].detail and "|grad|" in checks[0].detail
