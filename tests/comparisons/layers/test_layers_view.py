"""The layer view: every mapped layer torch beside Flax, the first divergence named, replica by replica.

Planted bugs (tests/_twins.py) are named where they were planted: the layer for a changed setting, the gap
for changed code between layers, the parameter for a gradient, the statistic for a running average. Honest
twins (the same function, other rounding) name nothing and every row agrees or differs by rounding. Each
planted bug runs on an uneven batch; the default tier rotates the strategies over the bugs, the slow tier
runs every bug with every strategy.
"""
from __future__ import annotations

import json

import _twins
import numpy as np
import pytest
from _helpers_harness import run_cli

from comparisons import ComparisonError, compare, layers
from comparisons.judge import Bounds
from comparisons.layers import layer_view
from comparisons.runs import RunConfig, RunInputs

UNEVEN = dict(batch_size=5, devices=2, steps=1, torch_devices="cpu")
STRATEGIES = ("explicit", "pmap", "sharded", "shard_map")

# twin -> (where, torch path, the previous agreeing layer or parameter (None: not asserted), kind)
PLANTED = {
    "layernorm_epsilon": ("inside", "norm", "fc1", "layernorm"),
    "gelu_tanh": ("between", "fc2", "fc1", "linear"),
    "conv_padding": ("inside", "conv", None, "conv"),
    "batchnorm_momentum": ("statistic", "norm.running_mean", None, "batchnorm"),
    "stop_gradient_bias": ("gradient", "mid.bias", None, "linear"),
}
HONEST = ["layernorm_same_epsilon", "gelu_by_hand", "conv_circular", "batchnorm_same_momentum", "reordered_sum",
          "gelu_exact", "shared_layer"]


def assert_names_the_planted_bug(report, name):
    where, torch_path, previous, kind = PLANTED[name]
    found = report.first_divergence
    assert found is not None, report.render("markdown")
    assert (found["where"], found["torch"], found["kind"], found["cause"]) == (where, torch_path, kind, "port"), found
    if previous is not None:
        assert found["previous"] == previous, found
    assert f"`{torch_path}`" in found["message"]


def assert_honest(report):
    assert report.first_divergence is None, report.first_divergence
    verdicts = {row[side]["verdict"] for row in report.layer_view for side in ("input", "output")}
    assert verdicts <= {"agree", "rounding"} and report.layer_view, report.layer_view


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_a_planted_bug_is_named_where_it_was_planted_without_asking_for_the_view(name):
    strategy = STRATEGIES[sorted(PLANTED).index(name) % len(STRATEGIES)]  # every strategy over the bugs
    seed = 1 + sorted(PLANTED).index(name)
    report = compare(_twins.make(name, seed), seed=seed, strategies=[strategy], **UNEVEN)
    assert not report.ok and report.layer_view is not None  # added because a torch-vs-JAX check failed
    assert_names_the_planted_bug(report, name)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("name", sorted(PLANTED))
@pytest.mark.parametrize("batch_size, devices", [(8, 3), (11, 4)])  # uneven, no 1-row chunk (BatchNorm)
def test_every_planted_bug_is_named_with_every_strategy(name, strategy, batch_size, devices):
    report = compare(_twins.make(name, devices), seed=devices, strategies=[strategy], batch_size=batch_size,
                     devices=devices, steps=1, torch_devices="cpu")
    assert_names_the_planted_bug(report, name)


@pytest.mark.parametrize("name", HONEST[:3])
def test_an_honest_twin_names_no_divergence_and_every_row_agrees_or_rounds(name):
    report = compare(_twins.make(name, 5), seed=5, strategies=["explicit"], layers=True, **UNEVEN)
    assert report.ok, report.render("markdown")
    assert_honest(report)
    assert report.replica_divergences == []


@pytest.mark.slow
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("name", HONEST)
def test_every_honest_twin_names_nothing_with_every_strategy(name, strategy):
    report = compare(_twins.make(name, 6), seed=6, strategies=[strategy], layers=True, batch_size=8, devices=3,
                     steps=1, torch_devices="cpu")
    assert_honest(report)


def test_a_layer_called_twice_gives_one_row_per_call_and_the_gap_before_the_second():
    honest = compare(_twins.make("shared_layer", 2), seed=2, strategies=["explicit"], layers=True, **UNEVEN)
    assert [(row["torch"], row["call"]) for row in honest.layer_view] == [("fc", 0), ("fc", 1), ("out", 0)]
    assert_honest(honest)
    buggy = compare(_twins.make("shared_layer_relu", 2), seed=2, strategies=["explicit"], **UNEVEN)
    found = buggy.first_divergence
    assert (found["where"], found["torch"], found["call"], found["previous"]) == ("between", "fc", 1, "fc"), found


def test_a_difference_after_the_last_layer_is_named_between_it_and_the_output():
    report = compare(_twins.make("hidden_column", 4), seed=4, strategies=["explicit"], **UNEVEN)
    found = report.first_divergence
    assert (found["where"], found["torch"], found["previous"]) == ("between", "(output)", "head"), found


def test_a_torch_replica_with_state_across_calls_is_named_with_its_device_and_layer():
    report = compare(_twins.make("counting_calls", 3), seed=3, strategies=["explicit"], layers=True,
                     batch_size=7, devices=3, steps=1, torch_devices="cpu")
    named = report.replica_divergences
    assert named and {record["backend"] for record in named} == {"torch"}, named  # the Flax half keeps no state
    assert all(record["torch"] == "fc2" and record["side"] == "input" for record in named), named
    assert all(record["device"] and f"replica {record['replica']} on {record['device']}" in record["message"]
               for record in named)


def test_a_jax_replica_given_a_stale_copy_of_the_weights_is_named_with_its_device_and_layer(monkeypatch):
    import jax

    import dp_jax

    honest = dp_jax.replicate

    def stale_second_copy(variables, devices):
        replicas = honest(variables, devices)
        stale = jax.tree.map(lambda a: a * 1.01, jax.device_get(replicas[1]))
        return [replicas[0], jax.device_put(stale, jax.devices()[1]), *replicas[2:]]
    monkeypatch.setattr(dp_jax, "replicate", stale_second_copy)
    pair = _twins.make("gelu_exact", 4)
    named = layers.replica_divergences(run_inputs(pair, batch_size=5), ["cpu"] * 3, jax.devices()[:3],
                                         bounds=Bounds(1e-5))
    assert [(r["backend"], r["replica"], r["torch"], r["side"]) for r in named] == [("jax", 1, "fc1", "output")]
    assert named[0]["device"] == str(jax.devices()[1])


def run_inputs(pair, batch_size=4, seed=0):
    inputs, targets = pair.make_inputs(batch_size, seed, np.dtype("float32"))
    return RunInputs(pair, RunConfig(batch_size, 1, "sgd", "float32", seed, 0), inputs, targets)


@pytest.mark.parametrize("layout, agrees", [("blind", False), ("channels_last", True)])
def test_a_registered_rule_brings_its_activation_layout(layout, agrees):
    import dataclasses

    from comparisons.convert import RULES, Activations, Layer, Rule, channels_last, register_rule

    conv = RULES["conv"]
    activations = Activations(channels_last, channels_last) if layout == "channels_last" else Activations()
    kind = f"user_conv_{layout}"
    register_rule(kind, Rule(conv.torch_keys, conv.torch_required, conv.buffers, conv.to_flax, conv.to_torch,
                             flax_names=conv.flax_names, activations=activations), replace=True)
    pair = _twins.make("conv_circular", 7)
    pair = dataclasses.replace(pair, mapping=tuple(Layer(kind, layer.torch, layer.flax) if layer.kind == "conv"
                                                   else layer for layer in pair.mapping))
    rows = layer_view(run_inputs(pair), bounds=Bounds(1e-5)).rows
    conv_row = next(row for row in rows if row.kind == kind)
    assert conv_row.output.agrees is agrees, conv_row
    assert conv_row.input.agrees is agrees  # NCHW beside NHWC: a shape mismatch unless the rule moves channels


def test_the_view_of_a_float64_run_judges_in_float64():
    report = compare(_twins.make("layernorm_epsilon", 8), seed=8, strategies=["explicit"], dtype="float64", **UNEVEN)
    assert report.first_divergence["torch"] == "norm" and report.first_divergence["cause"] == "port"


def test_layers_must_be_a_bool_naming_the_argument():
    with pytest.raises(ComparisonError, match=r"layers='yes'.*True or False"):
        compare("mlp", layers="yes")


def test_run_layers_writes_the_rows_and_the_first_divergence_in_json(tmp_path):
    out = tmp_path / "r.json"
    result = run_cli("run", "--model", "mlp", "--devices", "2", "--batch", "3", "--strategy", "explicit",
                     "--steps", "1", "--layers", "--format", "json", "--out", str(out))
    assert result.returncode == 0, result.stderr
    data = json.loads(out.read_text())
    assert [row["torch"] for row in data["layer_view"]] == ["fc1", "fc2", "out"]
    assert data["first_divergence"] is None and data["replica_divergences"] == []
    assert data["layers"] == {"fc1": "fc1", "fc2": "fc2", "out": "out"}  # the mapping stays under `layers`


def test_run_layers_with_processes_is_refused_naming_both_flags():
    result = run_cli("run", "--model", "mlp", "--layers", "--processes", "2")
    assert result.returncode == 2 and "--layers with --processes" in result.stderr


def test_a_view_added_unasked_that_cannot_run_leaves_a_note_and_the_verdicts(monkeypatch):
    from comparisons import layers as layer_package

    def broken(*args, **kwargs):
        raise RuntimeError("planted")
    monkeypatch.setattr(layer_package, "layer_view", broken)
    report = compare(_twins.make("gelu_tanh", 9), seed=9, strategies=["explicit"], **UNEVEN)
    assert not report.ok and report.layer_view is None and report.first_divergence is None
    assert any("layer view: could not run (RuntimeError: planted)" in note for note in report.notes)
    with pytest.raises(RuntimeError, match="planted"):
        compare(_twins.make("gelu_tanh", 9), seed=9, strategies=["explicit"], layers=True, **UNEVEN)
