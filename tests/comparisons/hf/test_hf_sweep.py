"""Every transformers family with a torch and a Flax class, from `hf.pair(name, T(config), F(config))` alone.

Default tier: the enumeration, the derived inputs, the up-front refusals, and a smoke run of four families
(a decoder, an encoder, a seq2seq model, a vision model). Slow tier: the whole sweep, checked against
the record docs/your_models.md's table is generated from (docs/hf_families.json).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers", reason="needs the hf extra: pip install -e '.[hf]'")
torch = pytest.importorskip("torch")

from comparisons import hf  # noqa: E402
from comparisons.hf import sweep  # noqa: E402

RECORD = Path(__file__).resolve().parents[3] / "docs" / "hf_families.json"


def test_families_are_read_from_transformers_auto_mappings_with_both_classes():
    from transformers.models.auto import modeling_auto, modeling_flax_auto

    found = sweep.families()
    assert {"gpt2", "bert", "bart", "vit", "t5", "whisper", "clip"} <= set(found)
    for family, (torch_class, flax_class) in found.items():
        assert hasattr(transformers, torch_class) and hasattr(transformers, flax_class), family
        assert flax_class in modeling_flax_auto.FLAX_MODEL_MAPPING_NAMES.values() or any(
            flax_class in m.values() for n, m in vars(modeling_flax_auto).items() if n.endswith("_MAPPING_NAMES"))
    assert "gpt2" in modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and found["gpt2"][0] == "GPT2LMHeadModel"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_derived_token_ids_avoid_special_ids_and_decoder_ids_start_at_the_decoder_start(seed):
    config = sweep.tiny_config("bart")
    config.vocab_size = 5  # bos 0, pad 1, eos 2 (also the decoder start): only 3 and 4 are ordinary ids
    model = transformers.BartForConditionalGeneration(config)
    make = hf.derived_inputs(model, labels=None)
    (ids, mask, decoder_ids), _ = make(6, seed, np.float32)
    assert make.input_names == ("input_ids", "attention_mask", "decoder_input_ids")
    assert {config.bos_token_id, config.pad_token_id, config.eos_token_id} == {0, 1, 2}
    assert set(np.unique(ids)) == {3, 4} and mask.min() == 1
    assert (decoder_ids[:, 0] == config.decoder_start_token_id).all() and set(np.unique(decoder_ids[:, 1:])) <= {3, 4}


def test_contrastive_logits_are_refused_before_any_run_naming_the_output():
    config = sweep.tiny_config("clip")
    with pytest.raises(hf.BatchDependentOutput, match=r"output 'logits_per_image' has shape \(2, 2\).*\(3, 3\)"):
        hf.pair("clip", transformers.CLIPModel(config), transformers.FlaxCLIPModel(config, _do_init=False))


@pytest.mark.parametrize("flax_class", ["FlaxT5ForConditionalGeneration", "FlaxMT5Model", "FlaxLongT5Model"])
def test_t5_family_gets_a_one_line_version_note_naming_both_versions(flax_class):
    import jax
    import jax.numpy as jnp

    with pytest.raises(TypeError, match="a_max"):  # the control: this JAX refuses the keyword
        jnp.clip(jnp.zeros(1), a_max=1.0)
    note = hf.version_note(getattr(transformers, flax_class))
    assert f"transformers {transformers.__version__}" in note and f"JAX {jax.__version__}" in note
    assert "jnp.clip(a_max=)" in note and "\n" not in note
    assert hf.version_note(transformers.FlaxBertModel) is None  # a family that runs gets none


def test_declarations_passed_to_pair_add_to_the_derived_ones():
    config = transformers.GPT2Config(n_embd=16, n_layer=1, n_head=2, vocab_size=40, n_positions=16,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                     summary_first_dropout=0.0)  # hf.pair refuses active dropout
    torch_model, flax_model = transformers.GPT2LMHeadModel(config), transformers.FlaxGPT2LMHeadModel(config,
                                                                                                     _do_init=False)
    pair = hf.pair("gpt2", torch_model, flax_model, torch_only=("*.extra_thing",))
    assert {"*.extra_thing", "past_key_values*"} <= set(pair.torch_only)
    assert ("lm_head.weight", "transformer.wte.weight") in pair.tied and pair.is_torch_only("lm_head.weight")


SMOKE = ["gpt2", "bert", "bart", "vit"]  # a decoder, an encoder, a seq2seq model, a vision model


@pytest.mark.parametrize("family", SMOKE)
def test_four_families_pass_from_two_lines(family):
    outcome = sweep.run_family(family, *sweep.families()[family], strategies=["explicit"])
    assert outcome.status == "pass", outcome.reason


RECORD_DATA = json.loads(RECORD.read_text())
RECORDED = {o["family"]: o for o in RECORD_DATA["outcomes"]}


def test_the_record_covers_every_family_transformers_maps_with_every_strategy():
    import dp_jax

    assert RECORD_DATA["transformers"] == transformers.__version__, "rerun: python -m comparisons.hf.sweep --write ..."
    assert set(RECORDED) == set(sweep.families())
    assert RECORD_DATA["strategies"] == list(dp_jax.STRATEGIES)
    assert (RECORD_DATA["batch_size"], RECORD_DATA["devices"]) == (5, 2)  # uneven: chunks 3 and 2


# The whole sweep, a family per test, in the slow tier: CI's --slow-share runs an eighth of the families per commit
# (by a hash of the test id), and all of them when this file changes. 28 min for all 40.
@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(RECORDED))
def test_family_ends_as_recorded_with_every_strategy_on_an_uneven_batch(family):
    recorded = RECORDED[family]
    outcome = sweep.run_family(family, *sweep.families()[family], strategies=RECORD_DATA["strategies"],
                               batch_size=RECORD_DATA["batch_size"], devices=RECORD_DATA["devices"])
    assert outcome.status == recorded["status"], (outcome.status, outcome.reason)
    if outcome.status in ("pass", "known_difference"):  # the named differences, strategy by strategy
        assert outcome.reason == recorded["reason"]


def test_the_record_has_34_passing_families_and_none_unexplained():
    outcomes = json.loads(RECORD.read_text())["outcomes"]
    passing = [o for o in outcomes if o["status"] in ("pass", "known_difference")]
    unexplained = [(o["family"], o["status"]) for o in outcomes if o["status"] in ("fail", "error")]
    assert len(passing) >= 34 and not unexplained, (len(passing), unexplained)
    assert all(o["reason"] for o in outcomes if o["status"] in ("refusal", "version_note", "known_difference"))
