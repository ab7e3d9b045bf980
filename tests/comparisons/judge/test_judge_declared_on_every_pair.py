"""A known difference a user declares works on every kind of pair as KNOWN_DIFFERENCES describes it:
'padding_row_gradient' on a pair_from_modules pair and on a hand-written ModelPair (hf.pair's is tested with
the Hugging Face families)."""
from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from comparisons import compare
from comparisons.models import pair_from_modules

VOCAB, WIDTH, PAD = 12, 4, 0


class TorchPadded(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, WIDTH, padding_idx=PAD)
        self.fc = torch.nn.Linear(WIDTH, 3)

    def forward(self, ids):
        return self.fc(self.embed(ids).mean(dim=1))


class FlaxPlain(nn.Module):
    @nn.compact
    def __call__(self, ids, train: bool = False):
        return nn.Dense(3, name="fc")(nn.Embed(VOCAB, WIDTH, name="embed")(ids).mean(axis=1))


def with_pads(batch_size, seed, dtype):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, VOCAB, (batch_size, 6))
    ids[:, -2:] = PAD  # padded sequences: the pad id is in every row
    return (ids.astype(np.int64),), rng.standard_normal((batch_size, 3)).astype(dtype)


def pair(known: tuple[str, ...], seed: int):
    torch.manual_seed(seed)
    return pair_from_modules("padded", TorchPadded(), FlaxPlain(), make_inputs=with_pads, known_differences=known,
                             loss_torch=lambda out, y: ((out - y) ** 2).mean(),
                             loss_jax=lambda out, y: jnp.mean((out - y) ** 2))


SMALL = dict(batch_size=5, devices=2, strategies=["explicit"], steps=1, torch_devices="cpu")


@pytest.mark.parametrize("kind", ["pair_from_modules", "ModelPair"])
def test_a_declared_padding_row_is_measured_apart_and_an_honest_twin_passes(kind):
    seed = int(np.random.default_rng().integers(1000))
    declared = pair(("padding_row_gradient",), seed)
    assert declared.padding_rows == (("embed.embedding", PAD),)
    if kind == "ModelPair":  # written by hand: the rows come from the torch module at compare time
        declared = dataclasses.replace(declared, padding_rows=())
    report = compare(declared, seed=seed, **SMALL)
    assert report.ok, report.render("markdown")
    known = [c for c in report.checks if c.subject == "known_difference"]
    assert len(known) == 1 and "embed.embedding row 0 (in the inputs)" in known[0].detail and known[0].max_abs > 0


def test_without_the_declaration_the_padding_row_fails_by_name():
    report = compare(pair((), 3), seed=3, **SMALL)
    grads = next(c for c in report.checks if c.subject == "gradients" and c.compared.startswith("torch DP vs jax"))
    assert not grads.passed and [leaf.path for leaf in grads.leaves if not leaf.passed] == ["embed.embedding"]


class TorchFrozen(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.fc = torch.nn.Linear(WIDTH, 3)
        self.embed.weight.requires_grad_(False)

    def forward(self, ids):
        return self.fc(self.embed(ids).mean(dim=1))


def frozen_pair(known: tuple[str, ...], seed: int):
    torch.manual_seed(seed)
    return pair_from_modules("frozen", TorchFrozen(), FlaxPlain(), make_inputs=with_pads, known_differences=known,
                             loss_torch=lambda out, y: ((out - y) ** 2).mean(),
                             loss_jax=lambda out, y: jnp.mean((out - y) ** 2))


@pytest.mark.parametrize("kind", ["pair_from_modules", "ModelPair"])
@pytest.mark.parametrize("strategy", ["explicit", "shard_map"])
def test_a_declared_frozen_parameter_is_reported_one_sided_and_kept_on_the_jax_side(kind, strategy):
    seed = int(np.random.default_rng().integers(1000))
    declared = frozen_pair(("frozen_in_torch",), seed)
    if kind == "ModelPair":
        declared = dataclasses.replace(declared, frozen=())
    report = compare(declared, seed=seed, **dict(SMALL, strategies=[strategy], steps=3, optimizer="adam"))
    assert report.ok, report.render("markdown")
    (known,) = [c for c in report.checks if c.subject == "known_difference"]
    assert "torch freezes embed.embedding" in known.detail and known.max_abs > 0


def test_an_undeclared_frozen_parameter_fails_naming_it():
    report = compare(frozen_pair((), 5), seed=5, **SMALL)
    unused = next(c for c in report.checks if c.subject == "unused_parameters")
    assert not unused.passed and "embed.weight" in unused.detail
