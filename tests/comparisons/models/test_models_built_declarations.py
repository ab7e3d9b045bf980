"""The declarations a known difference reads from the built torch module (the rows `padding_idx` keeps out of the
gradient, the parameters torch freezes) are filled where the pair is built, for every caller of
`ModelPair.build_declared` (compare() and the multi-process workers alike), not by compare() alone (issue 36)."""
from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax.numpy as jnp
import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from comparisons.models import pair_from_modules

VOCAB, WIDTH = 12, 4


class TorchNet(torch.nn.Module):
    def __init__(self, pad: int | None, frozen: bool):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, WIDTH, padding_idx=pad)
        self.fc = torch.nn.Linear(WIDTH, 3)
        self.embed.weight.requires_grad_(not frozen)

    def forward(self, ids):
        return self.fc(self.embed(ids).mean(dim=1))


class FlaxNet(nn.Module):
    @nn.compact
    def __call__(self, ids, train: bool = False):
        return nn.Dense(3, name="fc")(nn.Embed(VOCAB, WIDTH, name="embed")(ids).mean(axis=1))


def ids(batch_size, seed, dtype):
    rng = np.random.default_rng(seed)
    return (rng.integers(0, VOCAB, (batch_size, 5)),), rng.standard_normal((batch_size, 3)).astype(dtype)


def hand_written(pad: int | None, frozen: bool, known: tuple[str, ...]):
    """A pair as a user writes it by hand: no padding rows, no frozen paths filled in."""
    derived = pair_from_modules("declared", TorchNet(pad, frozen), FlaxNet(), make_inputs=ids,
                                known_differences=known, loss_torch=lambda out, y: ((out - y) ** 2).mean(),
                                loss_jax=lambda out, y: jnp.mean((out - y) ** 2))
    return dataclasses.replace(derived, padding_rows=(), frozen=())


@settings(max_examples=8, deadline=None)
@given(pad=st.one_of(st.none(), st.integers(0, VOCAB - 1)), frozen=st.booleans(),
       known=st.sets(st.sampled_from(["padding_row_gradient", "frozen_in_torch"])), seed=st.integers(0, 99))
def test_build_declared_fills_what_each_declared_difference_reads(pad, frozen, known, seed):
    pair = hand_written(pad, frozen, tuple(sorted(known)))
    declared, built = pair.build_declared(seed=seed)
    rows = (("embed.embedding", pad),) if pad is not None and "padding_row_gradient" in known else ()
    assert declared.padding_rows == rows
    assert declared.frozen == (("embed.embedding",) if frozen and "frozen_in_torch" in known else ())
    assert isinstance(built.torch, torch.nn.Module) and set(built.variables) == {"params"}
    assert built.torch.embed.weight.requires_grad is not frozen


def test_build_declared_keeps_what_the_pair_names_itself():
    pair = dataclasses.replace(hand_written(0, True, ("padding_row_gradient", "frozen_in_torch")),
                               padding_rows=(("embed.embedding", 3),), frozen=("fc.bias",))
    declared, _ = pair.build_declared()
    assert (declared.padding_rows, declared.frozen) == ((("embed.embedding", 3),), ("fc.bias",))
