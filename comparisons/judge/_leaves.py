"""One leaf judged on its own: element by element, at the leaf's own scale (docs/report_schema.md#leaves).

    |a - b| <= atol + rtol * |b|   for every entry (numpy.allclose's rule), where
    atol = ROUNDING_FACTOR * max(rounding, ulp * S)   when the leaf's float32 rounding was measured,
    atol = max(rtol * max|b|, ROUNDING_FACTOR * ulp * S)   when it was not,

`rounding` being max |x32 - x64| over the leaf (the computation's own float32 rounding, measured against
its float64 run), `ulp` the dtype's machine epsilon and S the largest |b| of the whole subject. Before the
numbers: shapes, dtypes, NaN/Inf (only at the same positions on both sides, and never all of a leaf: then
nothing finite was compared) and a leaf that is exactly zero
on one side only are failures of their own, each with its message.
"""
from __future__ import annotations

import numpy as np

from comparisons.verdicts import Leaf

ROUNDING_FACTOR = 8  # rounding differs between two orders of the same sums; 8x covers it with room


def leaf_atol(expected: np.ndarray, rtol: float, subject_scale: float, rounding: float | None) -> float:
    """The bound on entries near zero for one leaf (the module docstring's formula)."""
    ulp = float(np.finfo(expected.dtype).eps) if np.issubdtype(expected.dtype, np.floating) else 0.0
    if rounding is not None:
        return ROUNDING_FACTOR * max(rounding, ulp * subject_scale)
    scale = float(np.abs(expected).max(initial=0.0, where=np.isfinite(expected))) if expected.size else 0.0
    return max(rtol * scale, ROUNDING_FACTOR * ulp * subject_scale)


def judge_leaf(path: str, actual: np.ndarray, expected: np.ndarray, *, rtol: float, atol: float,
               sides: tuple[str, str]) -> Leaf:
    """The verdict on one leaf; `sides` names the actual and the expected side in messages ("jax:explicit",
    "torch")."""
    structural = _structure(path, actual, expected, sides)
    if structural is not None:
        return structural
    a, b = actual.astype(np.float64), expected.astype(np.float64)
    bad_a, bad_b = ~np.isfinite(a), ~np.isfinite(b)
    if bad_a.any() or bad_b.any():
        same = np.array_equal(bad_a, bad_b) and np.array_equal(a[bad_a], b[bad_b], equal_nan=True)
        if not same:
            counts = f"{int(bad_a.sum())} in {sides[0]}, {int(bad_b.sum())} in {sides[1]}"
            return Leaf(path, None, None, False, kind="non_finite", atol=atol,
                        message=f"`{path}`: NaN/Inf not at the same positions ({counts} of {a.size} entries)")
        if bad_a.all():
            return Leaf(path, None, None, False, kind="non_finite", atol=atol,
                        message=f"`{path}`: nothing finite to compare: all {a.size} entries are NaN/Inf on both sides "
                                "(a run blew up, or the inputs hold NaN/Inf)")
        a, b = np.where(bad_a, 0.0, a), np.where(bad_b, 0.0, b)
    diff = np.abs(a - b)
    max_abs = float(diff.max(initial=0.0))
    scale = float(np.abs(b).max(initial=0.0))
    rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else None)
    zero = _zero_on_one_side(path, a, b, atol, sides)
    if zero is not None:
        return Leaf(path, max_abs, rel, False, kind="zero", atol=atol, message=zero)
    beyond = diff > atol + rtol * np.abs(b)
    if not beyond.any():
        return Leaf(path, max_abs, rel, True, atol=atol)
    worst = np.unravel_index(int(np.argmax(np.where(beyond, diff, -1.0))), diff.shape) if diff.ndim else ()
    at = f" at {list(map(int, worst))}" if worst else ""
    message = (f"`{path}`: |Δ| {float(diff[worst]):.3g}{at} ({float(a[worst]):.6g} in {sides[0]} vs "
               f"{float(b[worst]):.6g} in {sides[1]}); {int(beyond.sum())} of {diff.size} entries beyond "
               f"{atol:.2g} + {rtol:g}·|b|")
    return Leaf(path, max_abs, rel, False, atol=atol, message=message)


def _structure(path: str, actual: np.ndarray, expected: np.ndarray, sides: tuple[str, str]) -> Leaf | None:
    if actual.shape != expected.shape:
        return Leaf(path, None, None, False, kind="shape",
                    message=f"`{path}`: shape {actual.shape} in {sides[0]} vs {expected.shape} in {sides[1]}")
    floats = [np.issubdtype(x.dtype, np.floating) for x in (actual, expected)]
    # Integer widths may differ (JAX without x64 has no int64); floats must agree, and a float is no integer.
    if any(floats) and actual.dtype != expected.dtype:
        return Leaf(path, None, None, False, kind="dtype",
                    message=f"`{path}`: dtype {actual.dtype} in {sides[0]} vs {expected.dtype} in {sides[1]}")
    return None


def _zero_on_one_side(path: str, a: np.ndarray, b: np.ndarray, atol: float, sides: tuple[str, str]) -> str | None:
    """Words for a leaf exactly zero on one side while the other is beyond its rounding bound, else None."""
    for zero, other, zero_side, other_side in ((a, b, *sides), (b, a, *reversed(sides))):
        peak = float(np.abs(other).max(initial=0.0))
        if not np.any(zero) and peak > atol:
            return f"`{path}` is exactly zero in {zero_side} but not in {other_side} (|x| up to {peak:.3g})"
    return None
