"""An NNX module where the harness takes a Flax model is a twin; an NNX object in the wrong place is refused in one
line that names NNX, never with the model's repr."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from _nnx_twins import NNXLM, TorchLM, lm_inputs, lm_loss_jax, lm_loss_torch, lm_pair
from flax import nnx

from comparisons.errors import UsageError
from comparisons.models import ModelPair, pair_from_modules
from comparisons.models.jax_linen import LINEN
from comparisons.models.user_pairs import load_pair


def _one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message and len(message) < 400, message
    return message


def test_a_model_pair_made_by_hand_around_an_nnx_module_builds():
    """Before: a 179-line message (the whole NNX repr, then 'not a flax.linen.Module')."""
    seed = int(np.random.default_rng().integers(0, 1000))
    derived = lm_pair(seed=seed)
    pair = ModelPair("by_hand", make_torch=lambda: TorchLM(), make_flax=lambda: NNXLM(rngs=nnx.Rngs(seed)),
                     mapping=derived.mapping, make_inputs=lm_inputs, loss_torch=lm_loss_torch,
                     loss_jax=lm_loss_jax, tied=derived.tied)
    torch_module, _, variables = pair.build(seed=seed)
    assert set(variables) == {"params"}
    np.testing.assert_array_equal(variables["params"]["embed"]["embedding"],
                                  torch_module.embed.weight.detach().numpy())
    np.testing.assert_array_equal(variables["params"]["blocks"]["0"]["q"]["kernel"],
                                  torch_module.blocks[0].q.weight.detach().numpy().T)


def test_pair_from_modules_takes_an_nnx_module():
    """Before: AttributeError "'NNXLM' object has no attribute 'init'" from the Flax init's trace."""
    pair = lm_pair()
    assert {layer.flax for layer in pair.mapping} >= {"blocks/0/q", "embed", "norm"}
    assert "Flax NNX NNXLM" in pair.description


@pytest.mark.parametrize("returned, named", [
    (lambda: NNXLM, "NNX Module class NNXLM"),
    (lambda: nnx.split(NNXLM(rngs=nnx.Rngs(0)))[0], "NNX GraphDef"),
    (lambda: nnx.state(NNXLM(rngs=nnx.Rngs(0))), "NNX State"),
])
def test_make_flax_returning_an_nnx_object_not_a_module_is_named(returned, named):
    derived = lm_pair()
    for side in (derived.jax_side, LINEN):  # derived by pair_from_modules, or a ModelPair's default
        pair = dataclasses.replace(derived, make_flax=returned, jax_side=side)
        with pytest.raises(UsageError) as error:
            pair.build()
        assert named in _one_line(error)


def test_an_nnx_module_where_torch_is_expected_is_named():
    pair = dataclasses.replace(lm_pair(), make_torch=lambda: NNXLM(rngs=nnx.Rngs(0)))
    with pytest.raises(UsageError) as error:
        pair.build_torch()
    assert "make_torch() returned an NNX Module (NNXLM)" in _one_line(error)
    with pytest.raises(UsageError) as swapped:
        pair_from_modules("swapped", NNXLM(rngs=nnx.Rngs(0)), TorchLM(), make_inputs=lm_inputs,
                          loss_torch=lm_loss_torch, loss_jax=lm_loss_jax)
    assert "torch_module is an NNX Module (NNXLM), not a torch.nn.Module" in _one_line(swapped)


@pytest.mark.parametrize("given, named", [
    (lambda: NNXLM, "the NNX Module class NNXLM itself, not a module: construct it"),
    (lambda: nnx.split(NNXLM(rngs=nnx.Rngs(0)))[0], "an NNX GraphDef alone (no weights): pass the module itself"),
    (lambda: nnx.state(NNXLM(rngs=nnx.Rngs(0))), "an NNX State alone (no structure): pass the module itself"),
], ids=["class", "graphdef", "state"])
def test_an_nnx_object_not_a_module_given_to_pair_from_modules_is_named(given, named):
    with pytest.raises(UsageError) as error:
        pair_from_modules("cls", torch.nn.Linear(2, 2), given(), make_inputs=lm_inputs,
                          loss_torch=lm_loss_torch, loss_jax=lm_loss_jax)
    assert f"flax_model is {named}" in _one_line(error)


def test_a_user_module_pairing_with_an_nnx_twin_loads_as_run_pair_loads_it(tmp_path, monkeypatch):
    """Before: `run --pair tiny_nnx:PAIR` exited with "importing tiny_nnx failed: AttributeError: 'NNXLM' object has
    no attribute 'init'"."""
    helpers = str(Path(__file__).parent)
    (tmp_path / "tiny_nnx_user.py").write_text(
        f"import sys\nsys.path.insert(0, {helpers!r})\n"
        "from _nnx_twins import lm_pair\n"
        "PAIR = lm_pair()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    pair = load_pair("tiny_nnx_user:PAIR")
    assert repr(pair.jax_side) == "NNX" and pair.tied == (("lm_head.weight", "embed.weight"),)
