"""The drift per step: the gap measured leaf by leaf, the rounding-or-jumps rule on drawn sequences, and real
20-step runs of honest twins (rounding) and planted bugs (jumps at step 1)."""
from __future__ import annotations

import math
import re

import _twins
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from comparisons import compare
from comparisons.judge import classify_drift, drift_line, relative_gap
from comparisons.runs import RunConfig, RunInputs

EPS32, EPS64 = float(np.finfo(np.float32).eps), float(np.finfo(np.float64).eps)
RTOL = 1e-5
SEEDS = st.integers(0, 2**32 - 1)
drawn = settings(max_examples=25, deadline=None)


def entries(gaps, float64=None):
    return [{"step": k, "loss": g, "gradients": g / 2, "params": g / 3, "worst": g, "strategy": "jax:explicit",
             "float64": None if float64 is None else float64[k - 1]} for k, g in enumerate(gaps, start=1)]


def steady(rng, steps: int) -> list[float]:
    """Rounding's shape: a few ulps at step 1, then at most x3 a step with noise, creeping past the tolerance."""
    gaps = [float(rng.uniform(1, 16)) * EPS32]
    for _ in range(steps - 1):
        gaps.append(gaps[-1] * float(rng.uniform(0.5, 3.0)))
    return gaps


@drawn
@given(seed=SEEDS, steps=st.integers(2, 60))
def test_slow_steady_growth_is_rounding_even_past_the_tolerance(seed, steps):
    gaps = steady(np.random.default_rng(seed), steps)
    assert classify_drift(entries(gaps), RTOL) == ("rounding", None)
    line = drift_line(entries(gaps), RTOL)
    assert line.startswith(f"drift: {'grows' if gaps[-1] > gaps[0] else 'shrinks'} like rounding"), line


@drawn
@given(seed=SEEDS, steps=st.integers(2, 40), data=st.data())
def test_a_gap_that_leaps_past_the_tolerance_jumps_at_that_step(seed, steps, data):
    rng = np.random.default_rng(seed)
    gaps = [min(g, RTOL / 2) for g in steady(rng, steps)]  # rounding that stays under the line
    step = data.draw(st.integers(1, steps))
    leap = max(RTOL, gaps[step - 1]) * float(rng.uniform(11, 1e4))
    gaps[step - 1:] = [leap * float(rng.uniform(1, 1.2)) ** i for i in range(steps - step + 1)]
    assert classify_drift(entries(gaps), RTOL) == ("jumps", step)
    assert drift_line(entries(gaps), RTOL).startswith(f"drift: jumps at step {step},")


@drawn
@given(seed=SEEDS, steps=st.integers(2, 30))
def test_a_leap_under_the_tolerance_is_not_a_jump_without_the_float64_run(seed, steps):
    rng = np.random.default_rng(seed)
    gaps = [float(rng.uniform(1, 4)) * EPS32] * steps
    gaps[-1] = RTOL * float(rng.uniform(0.1, 0.99))  # 100x and more, but inside the tolerance
    assert classify_drift(entries(gaps), RTOL)[0] == "rounding"


@drawn
@given(seed=SEEDS, steps=st.integers(2, 30), data=st.data())
def test_with_the_float64_run_a_gap_that_stays_in_float64_jumps_even_under_the_tolerance(seed, steps, data):
    rng = np.random.default_rng(seed)
    gaps = [min(g, RTOL / 2) for g in steady(rng, steps)]
    rounding64 = [g * EPS64 / EPS32 * float(rng.uniform(0.1, 3)) for g in gaps]  # what float64 shrinks it to
    assert classify_drift(entries(gaps, rounding64), RTOL) == ("rounding", None)
    step = data.draw(st.integers(1, steps))
    port = rounding64[: step - 1] + [g * float(rng.uniform(0.5, 1.0)) + 1e-11 for g in gaps[step - 1:]]
    assert classify_drift(entries(gaps, port), RTOL) == ("jumps", step)


def test_a_nan_gap_jumps_where_it_appears():
    assert classify_drift(entries([1e-7, 2e-7, math.nan, 3e-7]), RTOL) == ("jumps", 3)
    assert classify_drift(entries([1e-7, 2e-7], [1e-16, math.inf]), RTOL) == ("jumps", 2)


@drawn
@given(seed=SEEDS)
def test_relative_gap_is_the_worst_leaf_at_its_own_scale_and_noise_leaves_at_the_floor(seed):
    rng = np.random.default_rng(seed)
    big = rng.standard_normal((int(rng.integers(2, 6)), 3)) * float(10 ** rng.uniform(0, 3))
    small = rng.standard_normal(4)
    small *= float(10 ** rng.uniform(-1, 0)) * np.abs(big).max() / np.abs(small).max()  # its own scale, above the floor
    expected = {"layer": {"kernel": big, "bias": small}, "noise": {"bias": rng.standard_normal(3) * 1e-9}}
    delta = float(10 ** rng.uniform(-7, -3))
    actual = {"layer": {"kernel": big.copy(), "bias": small.copy()}, "noise": {"bias": np.zeros(3)}}
    index = tuple(int(rng.integers(0, n)) for n in small.shape)
    actual["layer"]["bias"][index] += delta * np.abs(small).max()  # a relative gap of `delta` in the bias
    floor_gap = np.abs(expected["noise"]["bias"]).max() / (1e-3 * np.abs(big).max())
    assert relative_gap(actual, expected) == pytest.approx(max(delta, floor_gap), rel=1e-6)
    assert floor_gap < 1e-5  # the noise leaf, all rounding around zero, does not read as a gap of 1


def test_one_step_records_no_drift_and_a_record_past_the_memory_bound_is_a_note():
    from comparisons.harness import TRAJECTORY_BYTES, with_trajectory

    config = RunConfig(8, 1, "sgd", "float32", 0, 0)
    run = RunInputs(None, config, (), None)
    assert with_trajectory(run, 10, 1, True) == (run, [])
    run = RunInputs(None, RunConfig(8, 50, "sgd", "float32", 0, 0), (), None)
    recorded, notes = with_trajectory(run, 1000, 4, True)
    assert recorded.config.trajectory and notes == []
    too_many = TRAJECTORY_BYTES // (50 * 2 * 4) + 1
    kept, notes = with_trajectory(run, too_many, 0, False)
    assert not kept.config.trajectory and "drift per step not recorded" in notes[0] and "50 steps" in notes[0]


def run_twin(name: str, **kwargs):
    options = {"batch_size": 10, "devices": 4, "steps": 20, "strategies": ["explicit", "sharded"],
               "torch_devices": "cpu", **kwargs}
    return compare(_twins.make(name, seed=3), **options)


@pytest.mark.parametrize(("name", "optimizer"), [("layernorm_same_epsilon", "sgd"), ("gelu_by_hand", "adam")])
def test_an_honest_twin_over_20_steps_grows_like_rounding(name, optimizer):
    report = run_twin(name, optimizer=optimizer)
    assert report.ok, report.render("table")
    assert [entry["step"] for entry in report.drift] == list(range(1, 21))
    assert classify_drift(report.drift, RTOL) == ("rounding", None)
    assert all(entry["float64"] < 1e-12 for entry in report.drift)  # rounding shrinks away in float64
    assert re.search(r"drift: (grows|shrinks) like rounding", report.render("table"))


def test_a_wrong_layernorm_epsilon_jumps_at_step_1_though_its_gap_is_under_the_tolerance():
    report = run_twin("layernorm_epsilon")
    assert not report.ok
    first = report.drift[0]
    assert first["float64"] > 1e-7  # the port's gap stays when both compute in float64
    assert classify_drift(report.drift, RTOL) == ("jumps", 1)
    assert "drift: jumps at step 1" in report.render("markdown")


def test_a_gelu_variant_jumps_at_step_1_without_the_float64_run_and_the_figures_match_the_checks():
    report = run_twin("gelu_tanh", precision="off", optimizer="momentum")
    assert classify_drift(report.drift, RTOL) == ("jumps", 1) and report.drift[0]["float64"] is None
    # the first step's gradients and the last step's parameters, as the checks measured them leaf by leaf
    for subject, entry, key in (("gradients", report.drift[0], "gradients"),
                                ("params_after_steps", report.drift[-1], "params")):
        cross = [c for c in report.checks if c.subject == subject and c.compared.startswith("torch DP vs jax")]
        assert entry[key] == pytest.approx(max(leaf.rel for c in cross for leaf in c.leaves), rel=1e-5)


def test_two_parametrisations_show_no_drift_and_the_note_says_why():
    # torch's LSTM has two biases per gate, Flax's one: the same optimizer moves them apart from step 2 on,
    # which is no port difference; a drift would read it as one
    report = compare("embedding_lstm", batch_size=6, devices=2, steps=3, strategies=["explicit"],
                     torch_devices="cpu")
    assert report.ok and report.drift == []
    assert any(note.startswith("params_after_steps and the drift per step not compared") for note in report.notes)
