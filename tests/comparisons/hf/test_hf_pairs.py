"""Real Hugging Face pairs through the harness as they are: GPT-2, ViT, ResNet from tiny random configs.

No downloads: models are built from config objects with random weights (offline mode is set).
Skipped when the `hf` extra (transformers < 5) is not installed.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
transformers = pytest.importorskip("transformers", reason="needs the hf extra: pip install -e '.[hf]'")
torch = pytest.importorskip("torch")

from comparisons import ComparisonError, UsageError, compare, hf, placement_of  # noqa: E402
from comparisons.errors import UsageTypeError  # noqa: E402

SMALL = dict(batch_size=5, devices=2, strategies=["explicit"], steps=1, torch_devices="cpu")


def gpt2(use_cache=False):
    config = transformers.GPT2Config(n_embd=16, n_layer=2, n_head=2, vocab_size=40, n_positions=16,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=use_cache)
    torch.manual_seed(0)
    return (transformers.GPT2LMHeadModel(config), transformers.FlaxGPT2LMHeadModel(config, _do_init=False),
            hf.token_inputs(vocab=40, length=7))


def vit(model="ViTForImageClassification"):
    config = transformers.ViTConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=24,
                                    image_size=8, patch_size=4, num_labels=3, hidden_dropout_prob=0.0,
                                    attention_probs_dropout_prob=0.0)
    torch.manual_seed(1)
    return (getattr(transformers, model)(config), getattr(transformers, "Flax" + model)(config, _do_init=False),
            hf.image_inputs(channels=3, size=8, classes=3))


def resnet():
    config = transformers.ResNetConfig(embedding_size=8, hidden_sizes=[16], depths=[1], layer_type="bottleneck",
                                       num_labels=3)
    torch.manual_seed(2)
    return (transformers.ResNetForImageClassification(config),
            transformers.FlaxResNetForImageClassification(config, _do_init=False),
            hf.image_inputs(channels=3, size=16, classes=3))


def checks_of(report, subject):
    return [c for c in report.checks if c.subject == subject]


@pytest.mark.slow  # docs/your_models.md runs the same GPT-2 pair in the default tier
def test_gpt2_tied_head_conv1d_and_causal_mask_buffers_pass_as_they_are():
    torch_model, flax_model, inputs = gpt2()
    pair = hf.pair("gpt2-tiny", torch_model, flax_model, make_inputs=inputs)
    kinds = {layer.torch: layer.kind for layer in pair.mapping}
    assert kinds["transformer.h.0.attn.c_attn"] == "hf_conv1d" and "lm_head" not in kinds
    report = compare(pair, seed=3, **SMALL)
    assert report.ok, report.render("markdown")
    torch_only = next(note for note in report.notes if note.startswith("torch-only"))
    tied = next(note for note in report.notes if note.startswith("tied"))
    assert "transformer.h.1.attn.bias" in torch_only and "lm_head.weight = transformer.wte.weight" in tied


def test_resnet_bottleneck_batchnorm_in_training_mode_names_the_biased_variance():
    torch_model, flax_model, inputs = resnet()
    report = compare(hf.pair("resnet-tiny", torch_model, flax_model, make_inputs=inputs), seed=4, **SMALL)
    assert report.ok, report.render("markdown")
    assert all(c.passed for c in checks_of(report, "batch_stats"))  # the means, and DP vs single in full
    known = checks_of(report, "known_difference")
    # chunk 0 has 3 images: 8x8 after the stem conv (192 values per channel), 4x4 after its pooling (48)
    assert len(known) == 1 and known[0].max_abs > 1e-4 and "n = 48..192" in known[0].detail


def test_vit_variables_from_transformers_converter_are_checked_bitwise_and_used():
    torch_model, flax_model, inputs = vit()
    variables = hf.from_pt_variables(torch_model, flax_model)
    pair = hf.pair("vit-tiny", torch_model, flax_model, make_inputs=inputs, variables=variables)
    assert {layer.kind for layer in pair.mapping if layer.torch == "vit.embeddings"} == {"hf_vit_embeddings"}
    report = compare(pair, seed=5, **SMALL)
    assert report.ok, report.render("markdown")
    assert [c.passed for c in checks_of(report, "conversion")] == [True]


def test_torch_model_output_is_placed_by_field():
    torch_model, _, inputs = gpt2()
    (ids,), _ = inputs(2, 0, np.float32)
    output = torch_model(torch.from_numpy(ids))
    assert type(output).__name__ == "CausalLMOutputWithCrossAttentions"
    paths = [(r.path, r.shape) for r in placement_of(output, role="output", name="out")]
    assert paths == [("out.logits", (2, 7, 40))]


@pytest.mark.slow
def test_vit_base_model_pooler_is_reported_unused_when_the_loss_skips_it():
    torch_model, flax_model, inputs = vit("ViTModel")

    def loss_torch(out, labels):
        return out.last_hidden_state.square().mean()

    def loss_jax(out, labels):
        return (out.last_hidden_state ** 2).mean()
    pair = hf.pair("vit-base-tiny", torch_model, flax_model, make_inputs=inputs,
                   loss_torch=loss_torch, loss_jax=loss_jax)
    report = compare(pair, seed=6, **SMALL)
    unused = checks_of(report, "unused_parameters")
    assert [c.passed for c in unused] == [True] and "pooler.dense.weight" in unused[0].detail
    assert report.ok, report.render("markdown")


@pytest.mark.slow
@pytest.mark.parametrize("make", [gpt2, vit, resnet])
def test_every_strategy_on_4_devices_with_from_pretrained_from_pt(make, tmp_path):
    torch_model, flax_model, inputs = make()
    torch_model.save_pretrained(tmp_path)
    loaded = type(flax_model).from_pretrained(tmp_path, from_pt=True)
    pair = hf.pair(make.__name__, torch_model, loaded, make_inputs=inputs, variables=loaded.params)
    report = compare(pair, batch_size=8, devices=4, steps=2, seed=7, torch_devices="cpu")
    assert report.ok, report.render("markdown")
    assert [c.passed for c in checks_of(report, "conversion")] == [True]


@pytest.mark.slow
def test_gpt2_with_its_cache_is_gathered_and_the_cache_listed_torch_only():
    torch_model, flax_model, inputs = gpt2(use_cache=True)
    report = compare(hf.pair("gpt2-cache", torch_model, flax_model, make_inputs=inputs), seed=8, **SMALL)
    assert report.ok, report.render("markdown")
    assert "past_key_values.1.1" in next(note for note in report.notes if note.startswith("torch-only"))
    torch_dp_vs_single = next(c for c in report.checks if c.subject == "outputs" and c.compared == "torch DP vs single")
    assert torch_dp_vs_single.passed  # the gathered cache equals the chunked reference's, leaf by leaf


def gpt_neo():
    config = transformers.GPTNeoConfig(hidden_size=16, num_layers=2, attention_types=[[["global", "local"], 1]],
                                       num_heads=2, vocab_size=30, max_position_embeddings=8, window_size=4)
    torch.manual_seed(3)
    return transformers.GPTNeoForCausalLM(config), transformers.FlaxGPTNeoForCausalLM(config, _do_init=False)


@pytest.mark.parametrize("missing", ["torch_model", "flax_model", "make_inputs"])
@pytest.mark.parametrize("value", [None, "gpt2", 3])
def test_hf_pair_names_the_argument_that_is_not_a_model(missing, value):
    if missing == "make_inputs" and value is None:
        pytest.skip("make_inputs=None derives the inputs from the model (tests/comparisons/hf/test_hf_sweep.py)")
    torch_model, flax_model, inputs = gpt2()
    arguments = {"torch_model": torch_model, "flax_model": flax_model, "make_inputs": inputs} | {missing: value}
    with pytest.raises(UsageTypeError) as raised:
        hf.pair("gpt2-tiny", arguments["torch_model"], arguments["flax_model"], make_inputs=arguments["make_inputs"])
    assert str(raised.value).startswith(f"hf.pair('gpt2-tiny'): {missing}={value!r} ")


@pytest.mark.parametrize("make", [hf.token_inputs, hf.image_inputs])
@pytest.mark.parametrize("bad", [0, -3, 2.5, "7", None, True])
def test_input_makers_name_the_argument_that_is_not_a_positive_integer(make, bad):
    names = ("vocab", "length") if make is hf.token_inputs else ("channels", "size", "classes")
    for argument in names:
        values = dict.fromkeys(names, 4) | {argument: bad}
        with pytest.raises(UsageError) as raised:
            make(**values)
        assert str(raised.value).startswith(f"hf.{make.__name__}: {argument}={bad!r}")
        assert "pass a positive integer" in str(raised.value)


@pytest.mark.parametrize("build, limit_name, length", [("gpt2", "n_positions", 17), ("gpt2", "n_positions", 40),
                                                        ("gpt_neo", "max_position_embeddings", 9)])
def test_a_token_length_over_the_models_positions_names_length_and_the_limit(build, limit_name, length):
    if build == "gpt2":
        torch_model, flax_model, _ = gpt2()
        vocab = 40
    else:
        (torch_model, flax_model), vocab = gpt_neo(), 30
    limit = getattr(torch_model.config, limit_name)
    with pytest.raises(ComparisonError) as raised:
        hf.pair("lm", torch_model, flax_model, make_inputs=hf.token_inputs(vocab=vocab, length=length))
    assert f"length {length}" in str(raised.value) and f"{limit_name}={limit}" in str(raised.value)
    assert f"length <= {limit}" in str(raised.value)
    hf.pair("lm", torch_model, flax_model, make_inputs=hf.token_inputs(vocab=vocab, length=limit))  # the limit is fine


def test_token_ids_beyond_the_models_vocabulary_are_refused_naming_vocab():
    torch_model, flax_model, _ = gpt2()  # vocab_size=40
    with pytest.raises(ComparisonError, match=r"vocab=41\) .* vocab_size=40; pass token_inputs\(vocab <= 40"):
        hf.pair("lm", torch_model, flax_model, make_inputs=hf.token_inputs(vocab=41, length=7))


BUILD_FLAX_GPT2 = """
import logging, transformers
{before}
config = transformers.GPT2Config(n_embd=16, n_layer=1, n_head=2, vocab_size=40, n_positions=16)
transformers.FlaxGPT2LMHeadModel(config, _do_init=False)
logging.getLogger("transformers.modeling_flax_utils").warning("another warning of that logger")
"""


@pytest.mark.parametrize("before, shown", [("from comparisons import hf", False), ("", True)])
def test_transformers_flax_deprecation_warning_is_filtered_once_comparisons_hf_is_imported(before, shown):
    import subprocess
    import sys

    from _helpers_harness import ROOT

    script = BUILD_FLAX_GPT2.format(before=before)
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert ("TensorFlow and JAX classes are deprecated" in done.stderr) is shown  # without hf: the control
    assert "another warning of that logger" in done.stderr  # only that one message is filtered
