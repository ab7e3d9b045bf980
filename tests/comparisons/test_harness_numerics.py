"""compare_trees: the tolerance rule (max |Δ| or relative norm error) and what a mismatch reports."""
from __future__ import annotations

import numpy as np
import pytest

from comparisons.judge import compare_trees


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_small_relative_error_on_large_values_passes_although_max_abs_is_large(seed):
    rng = np.random.default_rng(seed)
    expected = {"w": rng.normal(size=(50, 20)) * 1e4}
    actual = {"w": expected["w"] * (1 + 1e-7)}
    check = compare_trees("params", "a vs b", actual, expected, 1e-5)
    assert check.max_abs > 1e-5 and check.rel_norm < 1e-5 and check.passed


def test_tiny_absolute_error_on_near_zero_values_passes_although_relative_error_is_large():
    check = compare_trees("outputs", "a vs b", {"y": np.array([1e-9, 0.0])}, {"y": np.array([2e-9, 0.0])}, 1e-5)
    assert check.rel_norm == pytest.approx(0.5) and check.passed


def test_one_wrong_leaf_fails_and_is_named():
    rng = np.random.default_rng(4)
    expected = {"a": {"kernel": rng.normal(size=(3, 4))}, "b": {"bias": rng.normal(size=4)}}
    actual = {"a": {"kernel": expected["a"]["kernel"].T.reshape(3, 4)}, "b": {"bias": expected["b"]["bias"]}}
    check = compare_trees("gradients", "a vs b", actual, expected, 1e-5)
    assert not check.passed and check.detail == "worst leaf a.kernel"


def test_different_shapes_leaves_or_non_finite_values_fail():
    assert "shape (2,) vs (3,)" in compare_trees("o", "c", {"x": np.ones(2)}, {"x": np.ones(3)}, 1e-5).detail
    assert "missing ['y']" in compare_trees("o", "c", {"x": np.ones(2)}, {"x": np.ones(2), "y": 1.0}, 1e-5).detail
    nan = compare_trees("o", "c", {"x": np.array([np.nan])}, {"x": np.array([1.0])}, 1e-5)
    assert not nan.passed and "non-finite" in nan.detail


def test_a_zero_reference_has_no_relative_error():
    check = compare_trees("o", "c", {"x": np.array([1.0])}, {"x": np.array([0.0])}, 1e-5)
    assert check.rel_norm is None and not check.passed


# The boundary: an error equal to the tolerance passes (docs/report_schema.md: "within"), twice or
# ten times it fails. Errors are built to be exact in float64, so "equal" means equal.
MULTIPLES = [(1, True), (2, False), (10, False)]


@pytest.mark.parametrize("multiple, passes", MULTIPLES)
@pytest.mark.parametrize("tol", [1e-5, 1e-12, 2.0 ** -17])
@pytest.mark.parametrize("seed", [0, 1])
def test_max_abs_at_the_tolerance_passes_and_beyond_it_fails(multiple, passes, tol, seed):
    rng = np.random.default_rng(seed)
    expected = rng.normal(size=(4, 5)) * 1e-3  # small norm: the relative error stays far above tol
    row, col = rng.integers(4), rng.integers(5)
    expected[row, col] = 0.0
    actual = expected.copy()
    actual[row, col] = multiple * tol  # |actual - expected| is exactly multiple * tol
    check = compare_trees("outputs", "a vs b", {"y": actual}, {"y": expected}, tol)
    assert check.max_abs == multiple * tol and check.rel_norm > 10 * tol
    assert check.passed is passes


@pytest.mark.parametrize("multiple, passes", MULTIPLES)
@pytest.mark.parametrize("tol", [2.0 ** -17, 2.0 ** -40])
@pytest.mark.parametrize("seed", [0, 1])
def test_relative_norm_at_the_tolerance_passes_and_beyond_it_fails(multiple, passes, tol, seed):
    rng = np.random.default_rng(seed)
    expected = np.zeros(12)
    spots = rng.choice(12, size=4, replace=False)
    expected[spots] = rng.choice([-1.0, 1.0], size=4) * 2.0 ** 10  # norm exactly 2 ** 11
    actual = expected.copy()
    actual[spots[0]] += multiple * tol * 2.0 ** 11  # ||Δ|| / ||expected|| is exactly multiple * tol
    check = compare_trees("params", "a vs b", {"w": actual.reshape(3, 4)}, {"w": expected.reshape(3, 4)}, tol)
    assert check.rel_norm == multiple * tol and check.max_abs > 10 * tol
    assert check.passed is passes
