"""Verdicts a port can trust: planted-bug twins fail under compare()'s and `run`'s default tolerances and
precision, naming the leaf and the cause; honest twins, the same function with other rounding, pass.

Twins come from tests/_twins.py (pair_from_modules: no mapping is written by hand). On the code before
every leaf was judged on its own and float64 told port from rounding, each planted bug here passed.
"""
from __future__ import annotations

import json
import os

import _twins
import pytest
from _helpers_harness import ROOT, run_cli

from comparisons import compare

SMALL = dict(batch_size=6, devices=2, strategies=["explicit"], steps=1, torch_devices="cpu")
CROSS = "torch DP vs jax:explicit DP"

# twin -> (subject, a leaf that must be named failing, its kind)
PLANTED = {
    "layernorm_epsilon": ("gradients", "norm.scale", "values"),
    "gelu_tanh": ("gradients", "fc1.kernel", "values"),
    "stop_gradient_bias": ("gradients", "mid.bias", "zero"),
    "hidden_column": ("outputs", "(the whole output)", "values"),
    "conv_padding": ("gradients", "conv.kernel", "values"),
    "batchnorm_momentum": ("batch_stats", "norm.mean", "values"),
}
HONEST = ["layernorm_same_epsilon", "gelu_exact", "gelu_by_hand", "reordered_sum", "conv_circular",
          "batchnorm_same_momentum"]


def failing_leaf(report, subject, path):
    check = next(c for c in report.checks if c.subject == subject and c.compared == CROSS)
    return check, next((leaf for leaf in check.leaves if leaf.path == path and not leaf.passed), None)


@pytest.mark.parametrize("name", sorted(PLANTED))
@pytest.mark.parametrize("seed", [1, 2])
def test_a_planted_bug_fails_naming_the_leaf_and_the_port_cause(name, seed):
    report = compare(_twins.make(name, seed), seed=seed, **SMALL)
    subject, path, kind = PLANTED[name]
    check, leaf = failing_leaf(report, subject, path)
    assert not report.ok and not check.passed and check.cause == "port", report.render("markdown")
    assert leaf is not None and leaf.cause == "port" and leaf.kind == kind, check.leaves
    assert f"`{path}`" in report.render("table") and leaf.message.startswith("port:")  # every failing leaf listed
    assert all(c.passed for c in report.checks if "DP vs single" in c.compared)  # data parallelism is fine


def test_layernorm_epsilon_is_below_the_float32_tolerance_yet_fails_as_a_port():
    report = compare(_twins.make("layernorm_epsilon", 1), seed=1, **SMALL)
    outputs = next(c for c in report.checks if c.subject == "outputs" and c.compared == CROSS)
    assert outputs.max_abs < 1e-5 and outputs.rel_norm < 1e-5  # what the old rule passed
    assert not outputs.passed and outputs.cause == "port"


def test_a_stop_gradient_bias_says_no_gradient_reaches_it():
    report = compare(_twins.make("stop_gradient_bias", 1), seed=1, **SMALL)
    _, leaf = failing_leaf(report, "gradients", "mid.bias")
    assert "no gradient reaches `mid.bias` in jax" in leaf.message and "stop_gradient" in leaf.message
    params = next(c for c in report.checks if c.subject == "params_after_steps" and c.compared == CROSS)
    assert [x.path for x in params.leaves if not x.passed] == ["mid.bias"]


def test_a_small_wrong_column_is_named_beside_a_large_one():
    report = compare(_twins.make("hidden_column", 1), seed=1, **SMALL)
    check, leaf = failing_leaf(report, "outputs", "(the whole output)")
    assert check.rel_norm < 1e-5  # the whole output's norm hides it
    assert ", 1] (" in leaf.message and "6 of 12 entries" in leaf.message  # only column 1, every row


def test_an_output_that_differs_while_every_gradient_agrees_says_where_to_look_next():
    report = compare(_twins.make("post_processing", 1), seed=1, **SMALL)
    check, leaf = failing_leaf(report, "outputs", "probs")
    assert leaf.cause == "port" and [x.path for x in check.leaves if not x.passed] == ["probs"]
    assert "every parameter gradient agrees" in check.detail and "post-processing" in check.detail


def test_a_flax_layer_without_the_torch_bias_is_named_with_use_bias():
    import flax.linen as nn
    import torch

    from comparisons import ComparisonError
    from comparisons.models import pair_from_modules

    class NoBias(nn.Module):
        @nn.compact
        def __call__(self, x, train: bool = False):
            h = nn.Conv(4, (3, 3), padding="CIRCULAR", use_bias=False, name="conv")(x.transpose(0, 2, 3, 1))
            return nn.Dense(3, name="fc")(h.mean(axis=(1, 2)))

    torch.manual_seed(0)
    with pytest.raises(ComparisonError, match=r"the Flax `conv` has no bias: use_bias=False\?"):
        pair = pair_from_modules("no_bias", _twins.TorchConv(), NoBias(), make_inputs=_twins.images,
                                 loss_torch=_twins.mse_torch, loss_jax=_twins.mse_jax)
        compare(pair, **SMALL)


@pytest.mark.parametrize("name", HONEST)
def test_an_honest_twin_passes(name):
    report = compare(_twins.make(name, 3), seed=3, **SMALL)
    assert report.ok, report.render("markdown")


@pytest.mark.parametrize("name", ["gelu_by_hand", "reordered_sum"])
def test_the_same_function_with_other_rounding_differs_and_passes_as_rounding(name):
    report = compare(_twins.make(name, 4), seed=4, **SMALL)
    cross = [c for c in report.checks if c.compared == CROSS]
    assert report.ok and any(c.cause == "rounding" and c.max_abs > 0 for c in cross)
    assert not any(leaf.cause == "port" for c in cross for leaf in c.leaves)


# NNX's transformer_block failed here as port (a float64 gap of 0.6) while nnx.MultiHeadAttention's softmax ran in
# float32 inside the float64 run; the float64 copy now attends in float64 (models/jax_nnx.py).
@pytest.mark.parametrize("name, flax", [("cnn_bn", "nnx"), ("transformer_block", "linen"),
                                        ("transformer_block", "nnx")])
def test_adam_steps_on_gradients_that_are_zero_in_exact_arithmetic_pass_as_rounding(name, flax):
    # A conv bias before BatchNorm, an attention key bias: their gradients are rounding noise, which Adam
    # normalises into steps of lr. The old rule (and precision="off") failed params_after_steps here.
    report = compare(name, batch_size=7, devices=3, strategies=["explicit"], steps=3, optimizer="adam",
                     torch_devices="cpu", seed=2, flax=flax)
    assert report.ok, report.render("markdown")


def test_precision_off_cannot_tell_the_cause():
    report = compare(_twins.make("stop_gradient_bias", 1), seed=1, precision="off", **SMALL)
    check, leaf = failing_leaf(report, "gradients", "mid.bias")
    assert not report.ok and leaf.kind == "zero" and check.cause is None
    assert report.tolerance["float64_rtol"] is None and report.precision == "off"


def test_precision_float64_runs_everything_in_float64_and_calls_a_failure_a_port():
    report = compare(_twins.make("layernorm_epsilon", 1), seed=1, precision="float64", **SMALL)
    check, _ = failing_leaf(report, "outputs", "(the whole output)")
    assert report.dtype == "float64" and check.cause == "port" and report.tolerance["rtol"] == 1e-12


def test_rtol_and_atol_set_by_the_user_are_used_and_said_so():
    report = compare(_twins.make("gelu_exact", 1), seed=1, precision="off", rtol=1e-3, atol=1e-4, **SMALL)
    assert report.tolerance | {} == {"rtol": 1e-3, "rtol_source": "set by the user", "atol": 1e-4,
                                     "atol_source": "set by the user", "float64_rtol": None}
    numeric = [c for c in report.checks if c.leaves]
    assert numeric and all(c.tolerance == 1e-3 and all(x.atol == 1e-4 for x in c.leaves) for c in numeric)
    assert "rtol 1e-03 (set by the user); atol 1e-04 (set by the user)" in report.render("table")


@pytest.mark.parametrize("argument, value", [("rtol", -1e-5), ("atol", "1e-5"), ("rtol", float("nan")),
                                             ("atol", True), ("precision", "float16")])
def test_a_bad_tolerance_or_precision_is_refused_naming_it(argument, value):
    with pytest.raises(ValueError, match=f"compare: {argument}="):
        compare("mlp", **{argument: value}, **SMALL)


@pytest.fixture
def twins_importable(monkeypatch):
    """`--pair _twins:NAME` imports tests/_twins.py in the CLI's own process."""
    monkeypatch.setenv("PYTHONPATH", f"{ROOT / 'tests'}{os.pathsep}{ROOT}")


def test_run_fails_the_epsilon_twin_under_its_defaults_and_lists_the_leaves(twins_importable):
    result = run_cli("run", "--pair", "_twins:LAYERNORM_EPSILON", "--devices", "2", "--batch", "6", "--steps", "1",
                     "--strategy", "explicit", "--torch-devices", "cpu", "--format", "json")
    assert result.returncode == 1, result.stderr
    data = json.loads(result.stdout)
    cross = [c for c in data["checks"] if c["compared"] == CROSS and c["subject"] == "gradients"]
    assert data["precision"] == "float64-check" and cross[0]["cause"] == "port"
    assert {"path": "norm.scale", "cause": "port", "passed": False} .items() <= next(
        leaf for leaf in cross[0]["leaves"] if leaf["path"] == "norm.scale").items()


def test_run_passes_the_written_out_activation(twins_importable):
    result = run_cli("run", "--pair", "_twins:GELU_BY_HAND", "--devices", "2", "--batch", "6", "--steps", "1",
                     "--strategy", "explicit", "--torch-devices", "cpu")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "float64 check: rtol 1e-12" in result.stdout
