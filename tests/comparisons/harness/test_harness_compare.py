"""compare(): every verdict passes on faithful pipelines, and fails on a broken conversion or bad input."""
from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest

from comparisons import ComparisonError, convert, harness
from comparisons.harness import STRATEGIES

# torch on the CPU repeated: compare()'s default ('auto') would install virtual devices, which are
# process-global (their tests run in their own process: tests/virtual).
compare = functools.partial(harness.compare, torch_devices="cpu")

SUBJECTS = {"outputs", "gradients", "params_after_steps", "placement", "aliasing"}


def assert_all_verdicts_pass(report, strategies, batch_stats):
    assert report.ok, report.render("table")
    subjects = {c.subject for c in report.checks}
    assert SUBJECTS <= subjects
    assert ("batch_stats" in subjects) == batch_stats
    compared = {c.compared for c in report.checks}
    for strategy in strategies:
        assert f"torch DP vs jax:{strategy} DP" in compared
        assert f"jax:{strategy} DP vs single" in compared


# Default run: each model, device count and dtype at least once; the cross product is slow.
@pytest.mark.parametrize("model, batch, devices, dtype, strategies", [
    ("cnn_bn", 4, 1, "float32", ["explicit", "shard_map"]),
    ("cnn_bn", 5, 2, "float64", ["explicit"]),
    ("mlp", 6, 2, "float64", ["pmap"]),
])
def test_every_verdict_passes_for_faithful_pipelines(model, batch, devices, dtype, strategies):
    report = compare(model, batch_size=batch, devices=devices, strategies=strategies, steps=2,
                     dtype=dtype, seed=devices)
    assert_all_verdicts_pass(report, strategies, batch_stats=model == "cnn_bn")
    assert report.tolerance["rtol"] == (1e-5 if dtype == "float32" else 1e-12)
    assert report.precision == ("float64-check" if dtype == "float32" else "float64")  # float64: the run is the check


def test_float64_x64_mode_does_not_leak_out_of_compare():
    import jax
    import jax.numpy as jnp

    compare("mlp", batch_size=3, devices=1, strategies=["explicit"], steps=1, dtype="float64")
    assert not jax.config.jax_enable_x64
    assert jnp.asarray(np.ones(2)).dtype == jnp.float32


def test_a_second_compare_of_the_same_pair_and_shapes_compiles_nothing():
    from _helpers_jax import counting_compiles

    settings = dict(batch_size=7, devices=3, strategies=["explicit", "shard_map"], steps=1)
    with counting_compiles() as first_compiles:
        compare("mlp", seed=5, **settings)
    with counting_compiles() as second_compiles:
        report = compare("mlp", seed=6, **settings)
    assert first_compiles.count > 0
    assert second_compiles.count == 0
    assert report.ok


def test_batch_of_10_on_4_devices_passes_with_torch_chunks_and_replica_placement():
    report = compare("mlp", batch_size=10, devices=4, strategies=["explicit", "sharded"], steps=2, seed=3)
    assert_all_verdicts_pass(report, ["explicit", "sharded"], batch_stats=False)
    assert report.chunk_sizes == [3, 3, 3, 1]
    torch_inputs = report.placements["torch"].filter(role="input")
    assert [(r.replica, r.shape[0]) for r in torch_inputs] == [(0, 3), (1, 3), (2, 3), (3, 1)]
    jax_params = report.placements["jax:explicit"].filter(role="param")
    assert {(r.replica, r.device) for r in jax_params} == {(i, f"cpu:{i}") for i in range(4)}
    assert not any("pads the last chunk" in note for note in report.notes)  # exact: no padding row
    # DataParallel.placed shows the mapped strategy's replicas too, the short chunk on cpu:3
    sharded = report.placements["jax:sharded"]
    assert {(r.replica, r.device) for r in sharded.filter(role="param")} == {(i, f"cpu:{i}") for i in range(4)}
    assert [r.size // 12 for r in sharded.filter(role="input")] == [3, 3, 3, 1]  # mlp rows have 12 features
    aliasing = {c.compared: c.passed for c in report.checks if c.subject == "aliasing"}
    assert aliasing["jax:sharded: replica 0 shares, others copy"] is True


def test_a_transposed_kernel_in_the_conversion_fails_the_cross_backend_verdicts(monkeypatch):
    rule = convert.RULES["linear"]

    def square_kernel_not_transposed(t, layer, check):
        converted = rule.to_flax(t, layer, check)
        kernel = converted[("params", "kernel")]
        if kernel.shape[0] == kernel.shape[1]:  # fc2 is 32 x 32: the transpose is easy to forget
            converted[("params", "kernel")] = kernel.T
        return converted

    monkeypatch.setitem(convert.RULES, "linear", dataclasses.replace(rule, to_flax=square_kernel_not_transposed))
    report = compare("mlp", batch_size=6, devices=2, strategies=["explicit"], steps=1, seed=1)
    failed = {(c.subject, c.compared) for c in report.failures}
    assert ("outputs", "torch DP vs jax:explicit DP") in failed
    assert ("gradients", "torch DP vs jax:explicit DP") in failed
    assert not report.ok
    within = [c for c in report.checks if "DP vs single" in c.compared]
    assert all(c.passed for c in within)


@pytest.mark.parametrize("kwargs, message", [
    ({"pair": "resnet"}, "unknown model pair 'resnet'"),
    ({"strategies": ["vmap"]}, "strategy='vmap' is not supported"),
    ({"strategies": []}, "strategies=[] is empty"),
    ({"devices": 64}, "devices=64 but JAX has 8 device(s)"),
    ({"devices": 0}, "devices=0; pass a positive integer"),
    ({"batch_size": 0}, "batch_size=0; pass a positive integer"),
    ({"steps": 0}, "steps=0; pass a positive integer"),
    ({"dtype": "float16"}, "dtype='float16' is not supported"),
    ({"optimizer": "rmsprop"}, "optimizer='rmsprop' is not supported"),
])
def test_bad_input_raises_a_clear_error_naming_the_argument(kwargs, message):
    settings = {"pair": "mlp", "batch_size": 10, "devices": 4, "steps": 1} | kwargs
    with pytest.raises(ComparisonError, match=message.replace("[", r"\[").replace("(", r"\(")
                       .replace(")", r"\)")):
        compare(settings.pop("pair"), **settings)


def test_virtual_torch_devices_before_any_install_are_refused_naming_the_call():
    """In a fresh interpreter: installing vdev is process-wide and permanent, so an earlier test (any CLI run
    in this process with torch_devices 'auto') would have installed them and the refusal could not show."""
    import subprocess
    import sys

    from _helpers_harness import ROOT

    script = ("from comparisons import ComparisonError, compare\n"
              "try:\n    compare('mlp', batch_size=10, devices=4, steps=1, torch_devices='virtual')\n"
              "except ComparisonError as error:\n    print(error)\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "needs dp_torch.virtual.install" in done.stdout, done.stdout + done.stderr


def test_a_user_pair_whose_mapping_misses_a_parameter_is_refused():
    from comparisons import models

    mlp = models.get("mlp")
    partial = dataclasses.replace(mlp, name="mlp_without_out", mapping=mlp.mapping[:-1])
    with pytest.raises(ComparisonError, match=r"'mlp_without_out' cannot be converted.*out\.weight"):
        compare(partial, batch_size=4, devices=2, strategies=["explicit"], steps=1)


def test_the_harness_knows_every_dp_jax_strategy():
    import dp_jax

    assert tuple(STRATEGIES) == tuple(dp_jax.STRATEGIES)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("devices", [1, 2, 4])
@pytest.mark.parametrize("model", ["mlp", "cnn_bn", "transformer_block", "embedding_lstm"])
def test_full_matrix_every_verdict_passes(model, devices, dtype):
    report = compare(model, batch_size=4 * devices, devices=devices, strategies=STRATEGIES, steps=2,
                     dtype=dtype, seed=devices)
    assert_all_verdicts_pass(report, STRATEGIES, batch_stats=model == "cnn_bn")


@pytest.mark.slow
def test_lstm_under_the_shard_map_strategy_on_an_uneven_batch():
    # Flax's LSTM scan carry under shard_map's check_vma once failed here (TypeError in lax.scan).
    report = compare("embedding_lstm", batch_size=5, devices=2, strategies=["shard_map"], steps=1, seed=4)
    assert_all_verdicts_pass(report, ["shard_map"], batch_stats=False)
    short, = report.placements["jax:shard_map"].filter(role="input", replica=1)
    torch_short, = report.placements["torch"].filter(role="input", replica=1)
    assert short.shape == torch_short.shape and short.shape[0] == 2  # chunks (3, 2): the short one, its rows alone


@pytest.mark.slow
@pytest.mark.parametrize("devices", [2, 4])
def test_uneven_batchnorm_batches_pass_with_every_strategy(devices):
    # every strategy computes on exactly torch's chunks, so BatchNorm on an uneven batch runs them all
    report = compare("cnn_bn", batch_size=4 * devices - 1, devices=devices, strategies=None, steps=2)
    assert report.strategies == list(STRATEGIES)
    assert_all_verdicts_pass(report, STRATEGIES, batch_stats=True)


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", ["momentum", "adam"])
def test_optimizers_match_optax_after_three_steps(optimizer):
    report = compare("mlp", batch_size=8, devices=4, strategies=["explicit"], steps=3, optimizer=optimizer)
    assert report.ok, report.render("table")
