"""nnx.bridge twins are refused in one line naming the bridge and the native path: a linen twin wrapped as NNX
(nnx.bridge.ToNNX, whole or inside an NNX twin) or an NNX twin wrapped as linen (nnx.bridge.to_linen). Both ran
before and misled: every layer-view row 'missing', NNX's fixed float32 dtypes inside a float64 run."""
from __future__ import annotations

import dataclasses

import flax.linen as nn
import pytest
import torch
from _nnx_twins import NNXLM, lm_inputs, lm_loss_jax, lm_loss_torch, lm_pair
from flax import nnx

from comparisons.errors import UsageError
from comparisons.models import pair_from_modules


class NNXHead(nnx.Module):
    def __init__(self, *, rngs: nnx.Rngs):
        self.body = nnx.bridge.ToNNX(nn.Dense(3), rngs=rngs)
        self.head = nnx.Linear(3, 2, rngs=rngs)


def _bridged():
    linen_as_nnx = nnx.bridge.ToNNX(nn.Dense(2), rngs=nnx.Rngs(0))
    return [
        (linen_as_nnx, ["nnx.bridge.ToNNX", "linen Dense", "pass the linen module itself"]),
        (NNXHead(rngs=nnx.Rngs(0)), ["nnx.bridge.ToNNX at `body`", "linen Dense", "write `body` in NNX"]),
        (nnx.bridge.to_linen(NNXLM), ["nnx.bridge.to_linen(NNXLM)", "pass the NNX module itself",
                                      "NNXLM(..., rngs=nnx.Rngs(0))"]),
    ]


@pytest.mark.parametrize("index", range(3), ids=["ToNNX", "ToNNX_inside", "to_linen"])
def test_a_bridged_twin_is_refused_naming_the_bridge_and_the_native_path(index):
    bridged, words = _bridged()[index]
    with pytest.raises(UsageError) as given:
        pair_from_modules("bridged", torch.nn.Linear(2, 2), bridged, make_inputs=lm_inputs,
                          loss_torch=lm_loss_torch, loss_jax=lm_loss_jax)
    with pytest.raises(UsageError) as made:
        dataclasses.replace(lm_pair(), make_flax=lambda: bridged).build()
    for error in (given, made):
        message = str(error.value)
        assert "\n" not in message and len(message) < 400, message
        assert all(word in message for word in words), message
