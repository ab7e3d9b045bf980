"""compare() trains the JAX side through dp_jax's compiled step, and checks the eager path agrees.

"torch DP vs jax:<strategy> DP" on params_after_steps is then PyTorch's DataParallel loop (loss on
the gathered output, backward, optimizer.step()) against K compiled steps, on the pair machinery's
converted weights and inputs.
"""
from __future__ import annotations

import dataclasses
import functools

import jax
import pytest

from comparisons import harness
from comparisons.runs import jax_run

compare = functools.partial(harness.compare, torch_devices="cpu")
MAPPED = ("pmap", "sharded", "shard_map")


def compiled_checks(report):
    return {(c.subject, c.compared): c.passed for c in report.checks if "compiled step vs eager" in c.compared}


@pytest.mark.parametrize("optimizer, strategies", [
    ("sgd", ["explicit", *MAPPED]),
    ("momentum", ["shard_map"]),
    ("adam", ["pmap"]),
])
def test_k_compiled_steps_equal_torch_s_loop_and_the_eager_path(optimizer, strategies):
    report = compare("mlp", batch_size=11, devices=4, strategies=strategies, steps=3, optimizer=optimizer, seed=3)
    assert report.ok, report.render("table")
    checks = compiled_checks(report)
    mapped = [s for s in strategies if s != "explicit"]
    assert set(checks) == {(subject, f"jax:{s} compiled step vs eager")
                           for s in mapped for subject in ("gradients", "params_after_steps")}
    compared = {c.compared for c in report.checks if c.subject == "params_after_steps"}
    assert {f"torch DP vs jax:{s} DP" for s in strategies} <= compared


def test_batchnorm_pair_trains_through_the_compiled_step_with_chunk_0_statistics():
    # uneven BatchNorm batches through the compiled step: tests/dp_jax/test_jax_training.py
    report = compare("cnn_bn", batch_size=8, devices=4, strategies=["shard_map"], steps=2, optimizer="momentum")
    assert report.ok, report.render("table")
    assert all(compiled_checks(report).values()) and len(compiled_checks(report)) == 2


def test_a_compiled_step_that_drifts_from_the_eager_path_fails_its_check(monkeypatch):
    real = jax_run.train_compiled

    def drifting(*args, **kwargs):
        snapshot = real(*args, **kwargs)
        moved = jax.tree.map(lambda p: p + 1e-3, snapshot.params_after_steps)
        return dataclasses.replace(snapshot, params_after_steps=moved)

    monkeypatch.setattr(jax_run, "train_compiled", drifting)
    report = compare("mlp", batch_size=8, devices=2, strategies=["sharded"], steps=1, seed=4)
    checks = compiled_checks(report)
    assert checks[("params_after_steps", "jax:sharded compiled step vs eager")] is False
    assert checks[("gradients", "jax:sharded compiled step vs eager")] is True


def test_the_single_device_reference_trains_once_per_comparison_and_every_strategy_is_checked_against_it(
        monkeypatch):
    strategies = ["shard_map", "explicit"]  # a mapped run trains it, the eager explicit run reuses it
    built = []
    real = jax_run.reference_step

    def counting(*args, **kwargs):
        built.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(jax_run, "reference_step", counting)
    ticks = []
    report = compare("mlp", batch_size=7, devices=3, strategies=strategies, steps=2, precision="off", seed=5,
                     progress=lambda label, total: ticks.append((label, total)))
    assert report.ok, report.render("table")
    assert len(built) == 1  # the first strategy's run trains it; the others reuse its snapshot
    singles = {c.compared for c in report.checks if c.compared.startswith("jax:") and "single" in c.compared}
    assert {s for s in strategies if any(f"jax:{s} " in compared for compared in singles)} == set(strategies)
    total = 2 * 2 * (1 + len(strategies))  # DP and single per step, torch and every strategy
    assert len(ticks) == total and {t for _, t in ticks} == {total}
    assert sum(label == f"jax:{strategies[-1]}" for label, _ in ticks) == 4  # its reused reference still ticks
