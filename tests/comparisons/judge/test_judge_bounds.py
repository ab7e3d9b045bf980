"""Bounds(rtol, atol, cause): the one tolerance record of every judge; Sides(torch, flax): two sides by name."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from comparisons.judge import Bounds, Sides, compare_trees, judge_cross


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31), rtol=st.floats(1e-7, 1e-3), cause=st.sampled_from(["data_parallel", "port"]))
def test_the_bounds_cause_goes_on_every_leaf_that_differs_and_port_becomes_rounding_within_the_bound(seed, rtol,
                                                                                                    cause):
    rng = np.random.default_rng(seed)
    expected = {"same": rng.normal(size=5), "close": rng.normal(size=5) + 3.0, "far": rng.normal(size=5) + 3.0}
    actual = {"same": expected["same"].copy(), "close": expected["close"] * (1 + rtol / 10),
              "far": expected["far"] * (1 + 100 * rtol)}
    check = compare_trees("outputs", "a vs b", actual, expected, Bounds(rtol, 0.0, cause))
    leaves = {leaf.path: leaf for leaf in check.leaves}
    assert leaves["same"].cause is None and leaves["same"].passed
    assert leaves["close"].passed and leaves["close"].cause == ("rounding" if cause == "port" else cause)
    assert not leaves["far"].passed and leaves["far"].cause == cause
    assert check.tolerance == rtol and not check.passed


@pytest.mark.parametrize("absent", ["torch", "flax"])
def test_sides_are_read_by_name_so_a_leaf_on_one_side_only_is_named_on_its_side(absent):
    rng = np.random.default_rng(len(absent))
    both, extra = rng.normal(size=4), rng.normal(size=3)
    full, short = {"w": both, "b": extra}, {"w": both.copy()}
    float32 = Sides(torch=short, flax=full) if absent == "torch" else Sides(torch=full, flax=short)
    float64 = Sides(*({k: np.asarray(v, np.float64) for k, v in tree.items()} for tree in float32))
    check = judge_cross("params", float32, float64, Bounds(1e-5),
                        rounding={"w": 0.0, "b": 0.0}, labels=Sides(torch="torch DP", flax="jax DP"))
    [leaf] = [leaf for leaf in check.leaves if leaf.path == "b"]
    there, missing = ("jax DP", "torch DP") if absent == "torch" else ("torch DP", "jax DP")
    assert f"`b` is in {there} but not in {missing}" in leaf.message
    assert leaf.kind == ("extra" if absent == "torch" else "missing")
