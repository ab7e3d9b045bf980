"""The drift's `of_bound` measures a gap as the checks judge it: over drawn trees, bounds and measured rounding,
the ratio is at most 1 exactly when every leaf passes `judge_leaves` (judge/_leaves.py's rule)."""
from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from comparisons.judge import Bounds, bound_ratio, judge_leaves


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), rtol=st.sampled_from([1e-5, 1e-3]), atol=st.sampled_from([None, 1e-6]),
       measured=st.booleans(), factor=st.sampled_from([0.0, 0.5, 0.99, 1.01, 2.0, 50.0]))
def test_the_ratio_is_at_most_one_exactly_when_the_checks_pass_every_leaf(seed, rtol, atol, measured, factor):
    rng = np.random.default_rng(seed)
    torch = {f"l{i}": rng.standard_normal(int(rng.integers(1, 9))) * 10.0 ** rng.uniform(-3, 2)
             for i in range(int(rng.integers(1, 5)))}
    rounding = {p: float(rng.uniform(1e-9, 1e-6)) for p in torch} if measured else None
    bounds = Bounds(rtol, atol)
    first, _ = judge_leaves(torch, torch, bounds, rounding=rounding)  # each leaf's atol, as the checks give it
    allowed = {leaf.path: leaf.atol + rtol * np.abs(torch[leaf.path]) for leaf in first}
    moved = str(rng.choice(list(torch)))
    entry = int(rng.integers(torch[moved].size))
    jax = {p: x.copy() for p, x in torch.items()}
    jax[moved][entry] += factor * allowed[moved][entry] * rng.choice([-1.0, 1.0])
    leaves, _ = judge_leaves(jax, torch, bounds, rounding=rounding)
    ratio = bound_ratio(jax, torch, bounds, rounding)
    assert math.isclose(ratio, factor, rel_tol=1e-6, abs_tol=1e-12), (ratio, factor)
    assert (ratio <= 1.0) == all(leaf.passed for leaf in leaves), (ratio, leaves)


def test_nan_on_one_side_is_nan_and_at_the_same_place_on_both_is_no_gap():
    torch = {"w": np.array([1.0, np.nan, 2.0], np.float32)}
    assert bound_ratio(torch, torch, Bounds(1e-5)) == 0.0
    assert math.isnan(bound_ratio({"w": np.array([1.0, 1.0, np.nan], np.float32)}, torch, Bounds(1e-5)))
    assert bound_ratio({"w": np.ones(2, np.float32)}, {"w": np.zeros(2, np.float32)}, Bounds(1e-5, 0.0)) == math.inf
    assert bound_ratio({"w": np.ones(2)}, {"w": np.ones(2)}, Bounds(1e-5), skip=frozenset({"w"})) == 0.0
    assert bound_ratio({"w": np.ones(2) * 3}, {"w": np.ones(2)}, Bounds(1e-5), skip=frozenset({"w"})) == 0.0
