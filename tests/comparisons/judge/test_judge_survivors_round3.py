"""What a second mutation round on judge/ found unpinned (issue 35), each pinned from both sides: the rtol
weighs torch's value, the failure detail's count of leaves, the passing check's closest leaf."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from comparisons.judge import (
    Bounds,
    Sides,
    classify_drift,
    compare_trees,
    growth_per_step,
    judge_cross,
    judge_leaf,
    noise_gradients,
    summarise,
)
from comparisons.runs import Float64Reference, Snapshot
from comparisons.verdicts import Leaf

drawn = settings(max_examples=30, deadline=None)
SEEDS = st.integers(0, 2**32 - 1)


@drawn
@given(seed=SEEDS, rtol=st.sampled_from([0.2, 0.5]), factor=st.sampled_from([0.9, 0.99, 1.05, 1.3]))
def test_the_relative_bound_weighs_torchs_value_not_the_other_sides(seed, rtol, factor):
    rng = np.random.default_rng(seed)
    torch = rng.uniform(1.0, 10.0, int(rng.integers(1, 8))) * rng.choice([-1.0, 1.0])
    moved = int(rng.integers(torch.size))
    jax = torch.copy()
    jax[moved] += factor * rtol * abs(torch[moved]) * np.sign(torch[moved])  # away from zero: |jax| > |torch|
    leaf = judge_leaf("w", jax, torch, rtol=rtol, atol=0.0, sides=("jax", "torch"))
    assert leaf.passed == (factor <= 1.0), (factor, leaf)


@pytest.mark.parametrize("failing", range(9))
@settings(max_examples=4, deadline=None)
@given(seed=SEEDS)
def test_the_detail_lists_four_failing_leaves_and_counts_the_rest_or_names_the_leaf_closest_to_its_bound(seed,
                                                                                                         failing):
    rng = np.random.default_rng(seed)
    count = failing + int(rng.integers(1, 4))
    torch = {f"layer{i}.kernel": rng.standard_normal(5) for i in range(count)}
    jax = {path: x.copy() for path, x in torch.items()}
    bad = [str(p) for p in rng.choice(list(torch), size=failing, replace=False)]
    for path in bad:
        jax[path][int(rng.integers(5))] += 1.0
    near = str(rng.choice([p for p in torch if p not in bad]))  # the passing leaf nearest its bound
    for path in torch:
        if path not in bad:
            jax[path] = torch[path] * (1 + (5e-6 if path == near else 1e-8))
    check = compare_trees("gradients", "jax vs torch", jax, torch, Bounds(1e-5), sides=("jax", "torch"))
    assert check.passed == (not failing)
    if failing:
        named = [path for path in bad if f"`{path}`" in check.detail]
        assert len(named) == min(failing, 4) and check.detail.startswith(f"{failing} of {count} leaves fail")
        assert (f"(+{failing - 4} more failing leaves)" in check.detail) == (failing > 4), check.detail
    else:
        assert f"closest to its bound: {near} " in check.detail, check.detail


@drawn
@given(causes=st.lists(st.sampled_from(["port", "rounding", None]), min_size=1, max_size=6))
def test_a_check_is_a_port_difference_when_any_leaf_is_else_rounding_when_any_leaf_is(causes):
    leaves = [Leaf(f"l{i}.kernel", 1e-3 if cause else 0.0, 1e-3, cause != "port", cause) for i, cause in
              enumerate(causes)]
    check = summarise("gradients", "torch DP vs jax:pmap DP", leaves, None, 1e-5)
    assert check.cause == ("port" if "port" in causes else "rounding" if "rounding" in causes else None), causes
    assert check.passed == ("port" not in causes)


@drawn
@given(seed=SEEDS, factor=st.sampled_from([0.5, 3.0]))
def test_with_float32_islands_the_float64_runs_are_judged_at_the_float32_rtol(seed, factor):
    rng = np.random.default_rng(seed)
    torch64 = {"w": rng.uniform(50.0, 100.0, 6) * rng.choice([-1.0, 1.0], 6)}
    rtol, rounding = 1e-5, float(rng.uniform(1e-8, 1e-7))
    gap = factor * rtol * np.abs(torch64["w"])  # the float32 island's own rounding, in the float64 runs
    jax64 = {"w": torch64["w"] + gap}
    float32 = Sides({"w": torch64["w"].astype(np.float32)}, {"w": torch64["w"].astype(np.float32)})
    check = judge_cross("outputs", float32, Sides(torch64, jax64), Bounds(rtol), rounding={"w": rounding},
                        labels=Sides("torch DP", "jax:pmap DP"), float32_islands=True)
    (leaf,) = check.leaves
    assert (leaf.passed, leaf.cause) == ((True, None) if factor < 1 else (False, "port")), leaf


@drawn
@given(seed=SEEDS, small=st.sampled_from([1e-8, 1e-6, 1e-4]), tiny=st.sampled_from([1e-15, 1e-13]))
def test_only_a_gradient_at_float64_rounding_level_is_noise_a_small_real_one_stays_strict(seed, small, tiny):
    rng = np.random.default_rng(seed)
    scale = float(rng.uniform(1e-2, 10))
    big = rng.standard_normal(6) * scale
    grads = {"out.kernel": big, "fc.bias": np.full(3, small * np.abs(big).max()),
             "mid.bias": rng.uniform(-1, 1, 3) * tiny * np.abs(big).max()}  # float64 rounding: ~1e-16 relative
    noise = noise_gradients(Float64Reference(Snapshot(None, grads, {}, {}), Snapshot(None, grads, {}, {})))
    assert noise == {"mid.bias"}, (small, tiny)


@drawn
@given(seed=SEEDS, steps=st.integers(2, 20), factor=st.sampled_from([3.0, 9.0, 12.0, 30.0]), data=st.data())
def test_past_the_tolerance_a_step_jumps_only_beyond_ten_times_every_earlier_gap(seed, steps, factor, data):
    rng = np.random.default_rng(seed)
    rtol = 1e-5
    gaps = [rtol * float(rng.uniform(0.3, 0.5)) for _ in range(steps)]  # rounding under the line
    step = data.draw(st.integers(2, steps))
    gaps[step - 1] = factor * max(gaps[:step - 1])  # past the tolerance (3 x 0.3 rtol at least)
    gaps[step:] = [gaps[step - 1]] * (steps - step)
    found = [{"step": k, "loss": g, "gradients": g, "params": g, "worst": g, "strategy": "jax:pmap", "float64": None}
             for k, g in enumerate(gaps, start=1)]
    assert classify_drift(found, rtol) == (("jumps", step) if factor > 10 else ("rounding", None)), gaps


@drawn
@given(seed=SEEDS, dip=st.sampled_from([1e-3, 1e-2]), factor=st.sampled_from([3.0, 8.0]))
def test_a_step_is_weighed_against_the_largest_gap_before_it_not_the_last(seed, dip, factor):
    rng = np.random.default_rng(seed)
    rtol, high = 1e-5, 1e-5 * float(rng.uniform(0.4, 0.6))
    gaps = [high, high * dip, factor * high]  # back past the tolerance after a dip: under 10x the largest before
    found = [{"step": k, "loss": g, "gradients": g, "params": g, "worst": g, "strategy": "jax:pmap", "float64": None}
             for k, g in enumerate(gaps, start=1)]
    assert classify_drift(found, rtol) == ("rounding", None), gaps


@drawn
@given(seed=SEEDS, steps=st.integers(2, 40))
def test_the_growth_per_step_compounds_from_the_first_gap_to_the_last(seed, steps):
    rng = np.random.default_rng(seed)
    gaps = list(10.0 ** rng.uniform(-8, -5, steps))
    factor = growth_per_step(gaps, 1e-12)
    assert np.isclose(factor ** (steps - 1), gaps[-1] / gaps[0], rtol=1e-9), (factor, gaps)
