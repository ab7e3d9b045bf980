"""Heads and composites from the two-line recipe `hf.pair(name, T(config), F(config, _do_init=False))` (issue 36).

Derived inputs follow what each head reads: each sub-model's vocabulary (encoder-decoder composites),
(batch, choices, length) for multiple choice, one <eos> last in every row for a seq2seq classifier, the token
types transformers derives from the question length; a decoder that starts with its pad id declares the
padding row's gradient; a scalar output is refused by name. Default tier: `hf.pair` alone (the torch probe and
the Flax init trace), on tiny configs. Slow tier: a compare() per fix that needs a whole step to show.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers", reason="needs the hf extra: pip install -e '.[hf]'")
torch = pytest.importorskip("torch")

from comparisons import compare, hf  # noqa: E402

TINY = dict(hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16,
            max_position_embeddings=16, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def _bert(vocab: int, **extra):
    return transformers.BertConfig(vocab_size=vocab, pad_token_id=1, **TINY, **extra)


def _make(torch_model, batch: int, seed: int):
    return hf.derived_inputs(torch_model, labels=None)(batch, seed, np.float32)[0]


@pytest.mark.parametrize(("encoder_vocab", "decoder_vocab", "seed"), [(24, 90, 0), (90, 24, 1)])
def test_encoder_decoder_ids_stay_inside_each_sub_models_vocabulary(encoder_vocab, decoder_vocab, seed):
    config = transformers.EncoderDecoderConfig.from_encoder_decoder_configs(
        _bert(encoder_vocab), _bert(decoder_vocab, is_decoder=True, add_cross_attention=True))
    config.decoder_start_token_id, config.pad_token_id = 0, 1
    torch.manual_seed(seed)
    model = transformers.EncoderDecoderModel(config)
    ids, _mask, decoder_ids = _make(model, 4, seed)
    assert ids.max() < encoder_vocab and decoder_ids.max() < decoder_vocab
    assert (decoder_ids[:, 0] == 0).all()
    hf.pair("encoder-decoder", model, transformers.FlaxEncoderDecoderModel(config))  # probes torch: no IndexError


def test_a_gpt2_decoders_bos_past_its_vocabulary_is_not_the_decoder_start():
    vit = transformers.ViTConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16,
                                 image_size=8, patch_size=4)
    gpt2 = transformers.GPT2Config(vocab_size=30, n_embd=8, n_layer=1, n_head=2, n_positions=16,
                                   add_cross_attention=True, is_decoder=True,  # bos/eos stay 50256
                                   resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, summary_first_dropout=0.0)
    config = transformers.VisionEncoderDecoderConfig.from_encoder_decoder_configs(vit, gpt2)
    model = transformers.VisionEncoderDecoderModel(config)
    _pixels, decoder_ids = _make(model, 3, 0)
    assert decoder_ids.max() < 30
    hf.pair("vision-encoder-decoder", model, transformers.FlaxVisionEncoderDecoderModel(config))


@pytest.mark.parametrize("family", ["bert", "distilbert"])
def test_multiple_choice_inputs_are_batch_choices_length(family):
    if family == "bert":
        config = _bert(40)
        classes = transformers.BertForMultipleChoice, transformers.FlaxBertForMultipleChoice
    else:
        config = transformers.DistilBertConfig(vocab_size=40, dim=8, n_layers=1, n_heads=2, hidden_dim=16,
                                               max_position_embeddings=16, dropout=0.0, attention_dropout=0.0,
                                               seq_classif_dropout=0.0, pad_token_id=1)
        classes = transformers.DistilBertForMultipleChoice, transformers.FlaxDistilBertForMultipleChoice
    model = classes[0](config)
    ids, = _make(model, 3, 0)
    assert ids.ndim == 3 and ids.shape[:2] == (3, 2)
    pair = hf.pair(family, model, classes[1](config, _do_init=False))
    (ids,), labels = pair.make_inputs(5, 1, np.float32)
    assert ids.shape[:2] == (5, 2) and labels.shape == (5,) and set(np.unique(labels)) <= {0, 1}  # a choice a row


def _bart_config(seed: int):
    return transformers.BartConfig(vocab_size=30 + seed, d_model=8, encoder_layers=1, decoder_layers=1,
                                   encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=16,
                                   decoder_ffn_dim=16, max_position_embeddings=16, dropout=0.0, num_labels=3,
                                   attention_dropout=0.0, activation_dropout=0.0, classifier_dropout=0.0)


@pytest.mark.parametrize("seed", [0, 4])
def test_a_seq2seq_classifier_gets_one_eos_last_in_every_row_and_decoder_ids_as_long(seed):
    config = _bart_config(seed)
    model = transformers.BartForSequenceClassification(config)
    ids, _mask, decoder_ids = _make(model, 4, seed)
    assert (ids[:, -1] == config.eos_token_id).all() and ((ids == config.eos_token_id).sum(1) == 1).all()
    assert decoder_ids.shape == ids.shape
    pair = hf.pair("bart", model, transformers.FlaxBartForSequenceClassification(config, _do_init=False))
    module = transformers.FlaxBartForSequenceClassification.module_class(config, dtype=np.float64)
    assert module.bind({}).classification_head.dtype == np.float32  # Flax's head ignores the model's dtype
    assert "float32_islands" in pair.known_differences  # so the float64 run keeps a float32 island: measured


def _big_bird_qa(seed: int):
    config = transformers.BigBirdConfig(vocab_size=40, attention_type="original_full", sep_token_id=4, **TINY)
    torch.manual_seed(seed)
    return (transformers.BigBirdForQuestionAnswering(config),
            transformers.FlaxBigBirdForQuestionAnswering(config, _do_init=False))


@pytest.mark.parametrize("seed", [0, 3])
def test_question_answering_token_types_are_passed_as_torch_derives_them(seed):
    torch_model, _ = _big_bird_qa(seed)
    made = hf.derived_inputs(torch_model, labels=None)
    ids, mask, lengths, token_types = made(3, seed, np.float32)[0]
    assert made.input_names == ("input_ids", "attention_mask", "question_lengths", "token_type_ids")
    torch_model.eval()
    with torch.no_grad():  # transformers' own derivation, read off torch's forward, against the passed ones
        given = torch_model(torch.from_numpy(ids), torch.from_numpy(mask), torch.from_numpy(lengths),
                            torch.from_numpy(token_types)).start_logits
        derived = torch_model(torch.from_numpy(ids), torch.from_numpy(mask)).start_logits
    torch.testing.assert_close(given, derived, rtol=0, atol=0)
    assert token_types.min() == 0 and token_types.max() == 1  # the question's and the context's types


def test_a_scalar_output_is_refused_naming_it():
    config = transformers.Wav2Vec2Config(hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                         intermediate_size=16, conv_dim=(8, 8), conv_kernel=(10, 3),
                                         conv_stride=(5, 2), num_conv_pos_embeddings=4,
                                         num_conv_pos_embedding_groups=2, do_stable_layer_norm=True,
                                         feat_extract_norm="layer", apply_spec_augment=False, proj_codevector_dim=8,
                                         codevector_dim=8, num_codevectors_per_group=4, num_codevector_groups=2)
    torch_model = transformers.Wav2Vec2ForPreTraining(config)
    flax_model = transformers.FlaxWav2Vec2ForPreTraining(config, _do_init=False)
    with pytest.raises(hf.BatchDependentOutput, match=r"output 'codevector_perplexity' is a scalar \(shape \(\)\)"):
        hf.pair("wav2vec2", torch_model, flax_model)


def _wav2vec2(**settings):
    return transformers.Wav2Vec2Config(hidden_size=8, num_hidden_layers=1, num_attention_heads=2, vocab_size=12,
                                       intermediate_size=16, conv_dim=(8, 8), conv_kernel=(10, 3), conv_stride=(5, 2),
                                       num_conv_pos_embeddings=4, num_conv_pos_embedding_groups=2,
                                       do_stable_layer_norm=True, feat_extract_norm="layer", hidden_dropout=0.0,
                                       attention_dropout=0.0, activation_dropout=0.0, final_dropout=0.0,
                                       layerdrop=0.0, **settings)


@pytest.mark.parametrize(("settings", "refusal", "message"), [
    ({"mask_time_prob": 0.0}, "FlaxOnlyParameter", r"holds wav2vec2/masked_spec_embed .*config\.mask_time_prob=0\.05 "
                                                   r"and config\.apply_spec_augment=False"),
    ({"mask_time_prob": 0.05, "apply_spec_augment": True}, "RandomMasking",
     r"masks random time steps while training .*mask_time_prob=0\.05.*Set config\.apply_spec_augment=False")])
def test_ctc_gets_the_config_fix_a_user_can_apply(settings, refusal, message):
    def ctc(config):
        return transformers.Wav2Vec2ForCTC(config), transformers.FlaxWav2Vec2ForCTC(config, _do_init=False)
    with pytest.raises(getattr(hf, refusal), match=message):
        hf.pair("wav2vec2", *ctc(_wav2vec2(**settings)))
    pair = hf.pair("wav2vec2", *ctc(_wav2vec2(mask_time_prob=0.05, apply_spec_augment=False)))  # the fix given
    assert any(layer.torch == "wav2vec2" for layer in pair.mapping)  # masked_spec_embed converts, torch to Flax


def _marian(seed: int):
    config = transformers.MarianConfig(vocab_size=30, decoder_vocab_size=30, d_model=8, encoder_layers=1,
                                       decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
                                       encoder_ffn_dim=16, decoder_ffn_dim=16, max_position_embeddings=16,
                                       pad_token_id=1, eos_token_id=0, decoder_start_token_id=1, dropout=0.0,
                                       attention_dropout=0.0, activation_dropout=0.0)
    torch.manual_seed(seed)
    return transformers.MarianMTModel(config), transformers.FlaxMarianMTModel(config, _do_init=False)


def test_a_decoder_starting_with_its_pad_id_declares_the_padding_row_gradient():
    pair = hf.pair("marian", *_marian(0))
    assert "padding_row_gradient" in pair.known_differences
    assert ("model.shared.embedding", 1) in pair.padding_rows
    bart = transformers.BartForConditionalGeneration(_bart_config(0))  # the control: starts with eos (2), not pad
    assert "padding_row_gradient" not in hf.pair("bart", bart, transformers.FlaxBartForConditionalGeneration(
        bart.config, _do_init=False)).known_differences


def test_frozen_torch_only_tables_have_no_flax_leaf_through_a_root_layer():
    from comparisons.models import frozen_leaves

    pair = hf.pair("marian", *_marian(1))
    torch_model = pair.make_torch()
    assert any(layer.torch == "" for layer in pair.mapping)  # final_logits_bias: a layer at the root
    frozen = [n for n, p in torch_model.named_parameters() if not p.requires_grad]
    assert frozen and all("embed_positions" in n for n in frozen)
    assert frozen_leaves(torch_model, pair.mapping) == ()


# one compare() per fix that only a whole training step shows; explicit strategy, one step, 5 rows on 2 devices
@pytest.mark.slow
@pytest.mark.parametrize("case", ["marian", "big_bird_qa"])
def test_the_fixed_heads_pass_a_training_step(case):
    torch_model, flax_model = _marian(2) if case == "marian" else _big_bird_qa(2)
    report = compare(hf.pair(case, torch_model, flax_model), batch_size=5, devices=2, strategies=["explicit"],
                     steps=1, torch_devices="cpu", seed=2)
    assert report.ok, report.render("markdown")
    if case == "marian":  # the pad row: measured as a known difference, not silenced
        known = [c for c in report.checks if c.subject == "known_difference" and "padding row" in c.compared]
        assert len(known) == 1 and known[0].passed and known[0].max_abs > 1e-6, report.render("markdown")


def test_a_speech_encoder_decoder_builds_with_a_decoder_input_shape_inside_the_decoders_positions():
    encoder = _wav2vec2(mask_time_prob=0.05, apply_spec_augment=False)
    decoder = _bert(40, is_decoder=True, add_cross_attention=True)  # 16 positions, fewer than 1024 samples' frames
    config = transformers.SpeechEncoderDecoderConfig.from_encoder_decoder_configs(encoder, decoder)
    config.decoder_start_token_id, config.pad_token_id = 0, 1
    with pytest.raises(ValueError, match="broadcasting"):  # transformers' default: decoder ids as long as the frames
        transformers.FlaxSpeechEncoderDecoderModel(config)
    flax_model = transformers.FlaxSpeechEncoderDecoderModel(config, input_shape=((1, 1024), (1, 1)))  # the fix
    pair = hf.pair("speech-encoder-decoder", transformers.SpeechEncoderDecoderModel(config), flax_model)
    inputs = dict(zip(pair.make_inputs.input_names, pair.make_inputs(3, 0, np.float32)[0], strict=True))
    assert inputs["inputs"].ndim == 2 and inputs["decoder_input_ids"].shape[1] <= 16
    assert (inputs["decoder_input_ids"][:, 0] == 0).all()


def test_the_heads_sweep_lists_every_other_flax_head_of_a_family_with_its_torch_twin():
    from comparisons.hf import sweep

    families = sweep.families()
    bert = dict(sweep.heads("bert", families["bert"][1]))
    assert {"BertForMultipleChoice", "BertForQuestionAnswering", "BertModel"} <= set(bert)
    assert families["bert"][0] not in bert and not any("PreTrained" in name for name in bert)
    assert all(flax == "Flax" + torch_name and hasattr(transformers, torch_name) for torch_name, flax in bert.items())
    assert "T5EncoderModel" in dict(sweep.heads("t5", families["t5"][1]))
