"""The layer view on every built-in pair, the Hugging Face pairs of the suite, and its renderings.

Every pair is honest, so the view names no divergence and every row agrees or differs by rounding; the rows
follow torch's execution order, one per mapped layer's call (the LSTM's row is Flax's nn.RNN beside torch's
nn.LSTM; a conv's and a BatchNorm's activations are compared NCHW -> NHWC).
"""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from comparisons import compare, models
from comparisons.verdicts import ComparisonReport

SMALL = dict(batch_size=5, devices=2, strategies=["explicit"], steps=1, torch_devices="cpu", layers=True)


def assert_honest(report, order):
    assert report.ok, report.render("markdown")
    assert [row["torch"] for row in report.layer_view] == order
    verdicts = {row[side]["verdict"] for row in report.layer_view for side in ("input", "output")}
    assert verdicts <= {"agree", "rounding"}, report.layer_view
    assert report.first_divergence is None and report.replica_divergences == []


@pytest.mark.parametrize("name, flax", [("mlp", "nnx"), ("mlp", "linen"), ("embedding_lstm", "linen"),
                                        ("embedding_lstm", "nnx"),
                                        pytest.param("cnn_bn", "nnx", marks=pytest.mark.slow),
                                        pytest.param("transformer_block", "nnx", marks=pytest.mark.slow)])
def test_a_built_in_pair_names_no_divergence_and_rows_follow_torchs_order(name, flax):
    pair = models.get(name)
    report = compare(pair, seed=int(np.random.default_rng().integers(100)), flax=flax, **SMALL)
    assert_honest(report, [layer.torch for layer in pair.mapping])  # each built-in maps in call order




@pytest.mark.slow
@pytest.mark.parametrize("make", ["gpt2", "vit", "resnet"])
def test_hugging_face_pairs_name_no_divergence(make):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    pytest.importorskip("transformers", reason="needs the hf extra: pip install -e '.[hf]'")
    import test_hf_pairs

    from comparisons import hf

    torch_model, flax_model, inputs = getattr(test_hf_pairs, make)()
    pair = hf.pair(f"{make}-tiny", torch_model, flax_model, make_inputs=inputs)
    report = compare(pair, seed=3, **SMALL)
    torch_order = [row["torch"] for row in report.layer_view]
    assert set(torch_order) <= {layer.torch for layer in pair.mapping} and len(torch_order) >= len(pair.mapping) // 2
    assert_honest(report, torch_order)


@pytest.mark.slow
def test_a_bert_pair_from_two_lines_names_no_divergence_and_a_wrong_epsilon_inside_its_first_layernorm():
    pytest.importorskip("transformers", reason="needs the hf extra: pip install -e '.[hf]'")
    import torch
    import transformers

    from comparisons import hf
    from comparisons.hf import sweep

    torch.manual_seed(int(np.random.default_rng().integers(100)))
    config = sweep.tiny_config("bert")
    pair = hf.pair("bert-tiny", transformers.BertForMaskedLM(config),
                   transformers.FlaxBertForMaskedLM(config, _do_init=False))
    report = compare(pair, seed=5, **SMALL)
    torch_order = [row["torch"] for row in report.layer_view]
    assert any("attention" in path for path in torch_order) and len(torch_order) >= len(pair.mapping) // 2
    assert_honest(report, torch_order)

    wrong = transformers.BertConfig.from_dict({**config.to_dict(), "layer_norm_eps": 1e-3})
    planted = hf.pair("bert-epsilon", transformers.BertForMaskedLM(config),
                      transformers.FlaxBertForMaskedLM(wrong, _do_init=False))
    found = compare(planted, seed=5, **SMALL).first_divergence
    assert (found["where"], found["torch"], found["cause"]) == ("inside", "bert.embeddings.LayerNorm", "port")


def row(torch_path, verdict="agree", max_abs=0.0, cause=None):
    side = {"max_abs": max_abs, "rel": max_abs, "verdict": verdict, "cause": cause, "message": ""}
    return {"torch": torch_path, "flax": torch_path, "kind": "linear", "call": 0, "input": dict(side, verdict="agree"),
            "output": side}


def report_with_view(first_divergence, rows):
    return ComparisonReport(model="m", batch_size=5, devices=2, chunk_sizes=[3, 2], strategies=["explicit"], steps=1,
                            optimizer="sgd", dtype="float32", seed=0, torch_devices="cpu",
                            tolerance={"rtol": 1e-5, "rtol_source": "default", "atol": None, "atol_source": "derived",
                                       "float64_rtol": 1e-12},
                            layer_view=rows, first_divergence=first_divergence, replica_divergences=[])


def test_every_rendering_shows_the_rows_and_names_the_first_divergence():
    figure = float(np.random.default_rng().uniform(1e-4, 1e-2))
    found = {"where": "inside", "torch": "norm", "flax": "norm", "previous": "fc1", "cause": "port",
             "kind": "layernorm", "call": 0, "message": "`norm` (layernorm): output differs"}
    report = report_with_view(found, [row("fc1"), row("norm", "differs", figure, "port")])
    table, markdown, html = report.render("table"), report.render("markdown"), report.render("html")
    for text in (table, markdown, html):
        assert "first divergence (inside, port)" in text and f"{figure:.2e}" in text
    assert "differs (port)" in markdown and html.count("<tr class=fail>") == 1
    assert json.loads(report.to_json())["first_divergence"] == found


def test_without_the_view_no_rendering_mentions_it():
    report = report_with_view(None, None)
    assert all("first divergence" not in report.render(fmt) for fmt in ("table", "markdown", "html"))
