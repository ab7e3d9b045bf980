"""Four attention bugs a newcomer planted in a causal self-attention twin are told apart by the report: the
first divergence lies between the v projection and the output projection for each, and its hint names which."""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from _twins import mse_jax, mse_torch

from comparisons import compare
from comparisons.models import pair_from_modules

WIDTH, HEADS, POSITIONS = 8, 2, 5
NAMES = ("attention's scale", "attention's mask", "attention's softmax axis", "attention's head split")


class TorchAttention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.q, self.k, self.v, self.o = (torch.nn.Linear(WIDTH, WIDTH) for _ in range(4))

    def forward(self, x):
        b, t, e = x.shape
        d = e // HEADS
        q, k, v = (p(x).view(b, t, HEADS, d).transpose(1, 2) for p in (self.q, self.k, self.v))
        scores = q @ k.transpose(-1, -2) / d ** 0.5
        scores = scores.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), float("-inf"))
        context = torch.softmax(scores, dim=-1) @ v
        return self.o(context.transpose(1, 2).reshape(b, t, e)).mean(dim=1)


class FlaxAttention(nn.Module):
    bug: str = ""  # "" is the honest twin

    @nn.compact
    def __call__(self, x, train: bool = False):
        b, t, e = x.shape
        d = e // HEADS

        def heads(y):
            if self.bug == "heads":
                return y.reshape(b, t, d, HEADS).transpose(0, 3, 1, 2)
            return y.reshape(b, t, HEADS, d).transpose(0, 2, 1, 3)
        q, k, v = (heads(nn.Dense(WIDTH, name=name)(x)) for name in ("q", "k", "v"))
        scores = q @ k.transpose(0, 1, 3, 2) / (d if self.bug == "scale" else d ** 0.5)
        allowed = jnp.tril(jnp.ones((t, t), bool), k=1 if self.bug == "mask" else 0)
        scores = jnp.where(allowed, scores, -jnp.inf)
        weights = jax.nn.softmax(scores, axis=-2 if self.bug == "softmax" else -1)
        context = (weights @ v).transpose(0, 2, 1, 3).reshape(b, t, e)
        return nn.Dense(WIDTH, name="o")(context).mean(axis=1)


def sequences(batch_size, seed, dtype):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch_size, POSITIONS, WIDTH)).astype(dtype)
    return (x,), rng.standard_normal((batch_size, WIDTH)).astype(dtype)


def report_of(bug: str, seed: int):
    torch.manual_seed(seed)
    pair = pair_from_modules(f"attention_{bug or 'honest'}", TorchAttention(), FlaxAttention(bug),
                             make_inputs=sequences, loss_torch=mse_torch, loss_jax=mse_jax)
    return compare(pair, batch_size=4, devices=2, strategies=["explicit"], steps=1, torch_devices="cpu", seed=seed,
                   layers=True)


@pytest.mark.parametrize(("bug", "words"), [("scale", "attention's scale"), ("mask", "attention's mask"),
                                            ("softmax", "attention's softmax axis"),
                                            ("heads", "attention's head split or merge order")])
def test_each_attention_bug_is_named_between_the_v_and_the_output_projection(bug, words):
    report = report_of(bug, int(np.random.default_rng().integers(1000)))
    found = report.first_divergence
    assert not report.ok and (found["where"], found["previous"], found["torch"]) == ("between", "v", "o"), found
    assert words in found["message"], found["message"]
    others = [name for name in NAMES if not words.startswith(name)]
    assert not any(other in found["message"] for other in others), found["message"]


def test_the_honest_attention_twin_names_nothing():
    report = report_of("", int(np.random.default_rng().integers(1000)))
    assert report.ok and report.first_divergence is None, report.first_divergence
