"""compare_trees: every leaf judged on its own, element by element (|a - b| <= atol + rtol |b|), and each kind
of failure with its own message (docs/report_schema.md#leaves)."""
from __future__ import annotations

import numpy as np
import pytest

from comparisons.judge import Bounds, compare_trees

EPS32 = float(np.finfo(np.float32).eps)


def leaf(check, path):
    return next(x for x in check.leaves if x.path == path)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_small_relative_error_on_large_values_passes_although_max_abs_is_large(seed):
    rng = np.random.default_rng(seed)
    expected = {"w": rng.normal(size=(50, 20)) * 1e4}
    actual = {"w": expected["w"] * (1 + 1e-7)}
    check = compare_trees("params", "a vs b", actual, expected, Bounds(1e-5))
    assert check.max_abs > 1e-5 and check.passed and [x.path for x in check.leaves] == ["w"]


@pytest.mark.parametrize("seed", [0, 1])
def test_near_zero_entries_of_a_leaf_pass_within_the_leaf_scaled_atol(seed):
    rng = np.random.default_rng(seed)
    expected = rng.normal(size=8)
    expected[3] = 1e-9
    actual = expected.copy()
    actual[3] = 2e-9  # 100 % off, but 1e-9 against a leaf of scale ~1: rounding-sized
    check = compare_trees("outputs", "a vs b", {"y": actual}, {"y": expected}, Bounds(1e-5))
    assert check.passed and leaf(check, "y").atol == pytest.approx(1e-5 * np.abs(expected).max())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_small_leaf_cannot_hide_behind_a_large_one(seed):
    rng = np.random.default_rng(seed)
    expected = {"mid": {"kernel": rng.normal(size=(6, 4)) * 1e5, "bias": rng.uniform(0.5, 1.0, size=4)}}
    wrong = {"mid": {"kernel": expected["mid"]["kernel"], "bias": 2 * expected["mid"]["bias"]}}
    check = compare_trees("gradients", "torch DP vs jax:explicit DP", wrong, expected, Bounds(1e-5),
                          sides=("jax:explicit DP", "torch DP"))
    assert check.rel_norm < 1e-5  # the old rule's figure: the whole tree's norm would have passed it
    assert not check.passed and [x.path for x in check.leaves if not x.passed] == ["mid.bias"]
    assert "`mid.bias`" in check.detail and leaf(check, "mid.kernel").passed


def test_a_leaf_that_is_zero_on_one_side_only_says_no_gradient_reaches_it():
    rng = np.random.default_rng(3)
    expected = {"mid": {"kernel": rng.normal(size=(6, 4)) * 1e5, "bias": rng.normal(size=4)}}
    actual = {"mid": {"kernel": expected["mid"]["kernel"], "bias": np.zeros(4)}}
    check = compare_trees("gradients", "torch DP vs jax:explicit DP", actual, expected, Bounds(1e-5),
                          sides=("jax:explicit DP", "torch DP"))
    bias = leaf(check, "mid.bias")
    assert not check.passed and bias.kind == "zero"
    assert "no gradient reaches `mid.bias` in jax:explicit DP" in bias.message and "stop_gradient" in bias.message


@pytest.mark.parametrize("seed", [0, 1])
def test_a_small_column_cannot_hide_behind_a_large_one_inside_a_leaf(seed):
    rng = np.random.default_rng(seed)
    large = 1e5 * rng.choice([-1.0, 1.0], size=6) * rng.uniform(1, 3, size=6)
    expected = np.stack([large, rng.uniform(0.2, 0.8, size=6)], axis=1)
    actual = expected.copy()
    actual[:, 1] += 0.5  # a wrong column, ~1e-6 of the leaf's norm
    measured = {"": 1e5 * EPS32}  # the float32 rounding a 1e5 column carries
    check = compare_trees("outputs", "a vs b", actual, expected, Bounds(1e-5), rounding=measured)
    assert check.rel_norm < 1e-5 and not check.passed
    assert "at [0, 1]" in check.leaves[0].message and "6 of 12 entries" in check.leaves[0].message


# The boundary: |Δ| equal to atol + rtol |b| passes (numpy.allclose's "<="), twice or ten times it fails.
# Errors are built to be exact in float64, so "equal" means equal.
MULTIPLES = [(1, True), (2, False), (10, False)]


@pytest.mark.parametrize("multiple, passes", MULTIPLES)
@pytest.mark.parametrize("tol", [2.0 ** -10, 2.0 ** -17, 2.0 ** -40])
@pytest.mark.parametrize("seed", [0, 1])
def test_an_entry_at_the_bound_passes_and_beyond_it_fails(multiple, passes, tol, seed):
    rng = np.random.default_rng(seed)
    expected = rng.choice([-1.0, 1.0], size=(4, 5)) * 2.0 ** rng.integers(-3, 3, size=(4, 5))
    row, col = rng.integers(4), rng.integers(5)
    atol = 2.0 ** -30
    actual = expected.copy()
    actual[row, col] += np.sign(expected[row, col]) * multiple * (atol + tol * abs(expected[row, col]))
    check = compare_trees("outputs", "a vs b", {"y": actual}, {"y": expected}, Bounds(tol, atol))
    assert check.passed is passes


def test_the_derived_atol_is_rtol_times_the_leaf_scale_or_the_measured_rounding():
    tree = {"big": np.full(3, 100.0, dtype=np.float32), "tiny": np.full(3, 1e-8, dtype=np.float32)}
    plain = compare_trees("gradients", "a vs b", tree, tree, Bounds(1e-5))
    assert leaf(plain, "big").atol == pytest.approx(1e-3)
    assert leaf(plain, "tiny").atol == pytest.approx(8 * EPS32 * 100.0)  # the subject's rounding floor
    measured = compare_trees("gradients", "a vs b", tree, tree, Bounds(1e-5), rounding={"big": 1e-4, "tiny": 0.0})
    assert leaf(measured, "big").atol == pytest.approx(8e-4)
    assert leaf(measured, "tiny").atol == pytest.approx(8 * EPS32 * 100.0)


def test_shape_dtype_and_missing_or_extra_leaves_each_fail_with_their_own_message():
    shape = compare_trees("o", "c", {"x": np.ones(2)}, {"x": np.ones(3)}, Bounds(1e-5))
    assert not shape.passed and shape.leaves[0].kind == "shape" and "shape (2,) in actual vs (3,)" in shape.detail
    dtype = compare_trees("o", "c", {"x": np.ones(2, np.float32)}, {"x": np.ones(2)}, Bounds(1e-5))
    assert not dtype.passed and "dtype float32 in actual vs float64 in expected" in dtype.detail
    ints = compare_trees("o", "c", {"x": np.ones(2, np.int32)}, {"x": np.ones(2, np.int64)}, Bounds(1e-5))
    assert ints.passed  # JAX without x64 has no int64: integer widths may differ
    leaves = compare_trees("o", "c", {"x": np.ones(2), "z": 1.0}, {"x": np.ones(2), "y": 1.0}, Bounds(1e-5))
    kinds = {x.path: x.kind for x in leaves.leaves}
    assert not leaves.passed and kinds == {"y": "missing", "z": "extra", "x": "values"}


def test_a_missing_flax_bias_suggests_use_bias_false():
    check = compare_trees("gradients", "torch DP vs jax:explicit DP", {"conv": {"kernel": np.ones(2)}},
                          {"conv": {"kernel": np.ones(2), "bias": np.ones(2)}}, Bounds(1e-5),
                          sides=("jax:explicit DP", "torch DP"))
    assert "the Flax `conv` has no bias: use_bias=False?" in leaf(check, "conv.bias").message


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values_fail_on_either_side_unless_at_the_same_positions(bad):
    finite, broken = np.array([1.0, 2.0]), np.array([1.0, bad])
    for actual, expected in ((broken, finite), (finite, broken)):
        check = compare_trees("o", "c", {"x": actual}, {"x": expected}, Bounds(1e-5))
        assert not check.passed and check.leaves[0].kind == "non_finite" and "NaN/Inf" in check.detail
    assert compare_trees("o", "c", {"x": broken}, {"x": broken.copy()}, Bounds(1e-5)).passed
    other = np.array([1.0, -np.inf if bad == np.inf else np.inf])
    assert not compare_trees("o", "c", {"x": broken}, {"x": other}, Bounds(1e-5)).passed


def test_a_zero_reference_has_no_relative_error():
    check = compare_trees("o", "c", {"x": np.array([1.0])}, {"x": np.array([0.0])}, Bounds(1e-5))
    assert check.rel_norm is None and not check.passed and check.leaves[0].kind == "zero"
