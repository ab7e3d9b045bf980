"""hf.pair compares the two models' classes and configs before anything else and names a mismatch in one line
(family, head, tie_word_embeddings, sizes, variables= that do not fit the Flax model), not "a Flax path is
missing (close: [])"; and refuses dropout on, naming the config keys to set to 0 (issue 36). Tiny configs with
random weights, no download."""
from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
transformers = pytest.importorskip("transformers", reason="needs the hf extra: pip install -e '.[hf]'")
torch = pytest.importorskip("torch")

from comparisons import hf  # noqa: E402
from comparisons.errors import ComparisonError, UsageError  # noqa: E402


def bert(**changes):
    sizes = dict(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=24,
                 max_position_embeddings=32, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=3)
    return transformers.BertConfig(**{**sizes, **changes})


def gpt2(**changes):
    sizes = dict(n_embd=16, n_layer=1, n_head=2, vocab_size=64, n_positions=32, resid_pdrop=0.0, embd_pdrop=0.0,
                 attn_pdrop=0.0)
    return transformers.GPT2Config(**{**sizes, **changes})


def flax(name, config):
    return getattr(transformers, name)(config, _do_init=False)


def refusal(torch_model, flax_model, **given) -> str:
    with pytest.raises(UsageError) as caught:
        hf.pair("twins", torch_model, flax_model, **given)
    message = str(caught.value)
    assert "close: []" not in message and "flax_path" not in message and "\n" not in message, message
    assert message.startswith("hf.pair('twins'): "), message
    return message


def test_two_families_are_named_with_their_model_types():
    message = refusal(transformers.BertModel(bert()), flax("FlaxGPT2Model", gpt2()))
    assert "BertModel (model_type 'bert')" in message and "FlaxGPT2Model (model_type 'gpt2')" in message
    assert "FlaxBertModel(config, _do_init=False)" in message


HEADS = [("BertForMaskedLM", "FlaxBertModel"), ("BertModel", "FlaxBertForMaskedLM"),
         ("BertForMaskedLM", "FlaxBertForSequenceClassification"), ("BertLMHeadModel", "FlaxBertForMaskedLM")]


@pytest.mark.parametrize("torch_name, flax_name", HEADS)
def test_two_heads_of_one_family_are_named(torch_name, flax_name):
    config = bert(is_decoder=torch_name == "BertLMHeadModel")
    message = refusal(getattr(transformers, torch_name)(config), flax(flax_name, config))
    assert f"torch {torch_name}" in message and f"Flax {flax_name}" in message and "head" in message
    assert f"pass Flax{torch_name.replace('LMHeadModel', 'ForCausalLM')}(config, _do_init=False)" in message


def test_the_causal_lm_twins_that_transformers_names_apart_are_no_mismatch():
    config = bert(is_decoder=True)
    built = hf.pair("twins", transformers.BertLMHeadModel(config), flax("FlaxBertForCausalLM", config))
    assert built.mapping


@settings(max_examples=6, deadline=None)
@given(changed=st.sets(st.sampled_from(["hidden_size", "num_hidden_layers", "vocab_size", "intermediate_size"]),
                       min_size=1), tie=st.booleans())
def test_configs_that_differ_are_named_key_by_key(changed, tie):
    doubled = {"hidden_size": 32, "num_hidden_layers": 2, "vocab_size": 128, "intermediate_size": 48}
    torch_config = bert(tie_word_embeddings=True)
    flax_config = bert(tie_word_embeddings=tie, **{key: doubled[key] for key in changed})
    message = refusal(transformers.BertForMaskedLM(torch_config), flax("FlaxBertForMaskedLM", flax_config))
    for key in changed:
        assert f"{key} ({getattr(torch_config, key)} in torch, {doubled[key]} in Flax)" in message, key
    assert ("tie_word_embeddings (True in torch, False in Flax)" in message) is (not tie)
    assert "build both from one config" in message


def test_tie_word_embeddings_alone_is_named():
    message = refusal(transformers.GPT2LMHeadModel(gpt2(tie_word_embeddings=False)),
                      flax("FlaxGPT2LMHeadModel", gpt2(tie_word_embeddings=True)))
    assert "tie_word_embeddings (False in torch, True in Flax)" in message


GARBAGE = [("a string", "params"), ("an empty dict", {}), ("another model's", "gpt2"), ("one leaf off", "off")]


@pytest.mark.parametrize("label, variables", GARBAGE, ids=[g[0] for g in GARBAGE])
def test_variables_that_do_not_fit_the_flax_model_are_named(label, variables):
    config = bert()
    torch_model, flax_model = transformers.BertModel(config), flax("FlaxBertModel", config)
    if variables == "gpt2":
        variables = transformers.FlaxGPT2Model(gpt2()).params
    elif variables == "off":
        variables = transformers.FlaxBertModel(config).params
        variables["embeddings"]["word_embeddings"]["embedding"] = np.zeros((3, 16), np.float32)
    message = refusal(torch_model, flax_model, variables=variables)
    assert "variables=" in message and "FlaxBertModel" in message
    if label == "one leaf off":
        assert "embeddings.word_embeddings.embedding" in message and "(3, 16)" in message and "(64, 16)" in message


BERT_RATES = ["hidden_dropout_prob", "attention_probs_dropout_prob"]
GPT2_RATES = ["resid_pdrop", "embd_pdrop", "attn_pdrop"]


@settings(max_examples=4, deadline=None)
@given(family=st.sampled_from(["bert", "gpt2"]), data=st.data())
def test_dropout_on_is_refused_naming_each_config_key_and_a_torch_module(family, data):
    rates = BERT_RATES if family == "bert" else GPT2_RATES
    on = data.draw(st.sets(st.sampled_from(rates), min_size=1))
    values = {key: data.draw(st.sampled_from([0.05, 0.1, 0.3]), label=key) for key in on}
    make = bert if family == "bert" else gpt2
    config = make(**values)
    torch_name = "BertForMaskedLM" if family == "bert" else "GPT2LMHeadModel"
    with pytest.raises(ComparisonError) as caught:
        hf.pair("twins", getattr(transformers, torch_name)(config), flax(f"Flax{torch_name}", config))
    message = str(caught.value)
    for key, value in values.items():
        assert f"{key}={value}" in message and f"{key}=0.0" in message, key
    assert "torch modules" in message and "p=" in message and "different random masks" in message
    assert all(key in message for key in on) and not any(key in message for key in set(rates) - on)


def test_a_positive_rate_no_module_uses_is_no_dropout():
    """GPT-2's summary_first_dropout (0.1 by default) feeds only the double-heads model's summary: an LM head pair
    with every other rate 0 is no training with dropout."""
    config = gpt2()
    assert config.summary_first_dropout > 0
    built = hf.pair("twins", transformers.GPT2LMHeadModel(config), flax("FlaxGPT2LMHeadModel", config))
    assert built.mapping
