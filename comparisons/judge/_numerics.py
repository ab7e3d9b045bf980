"""Numeric verdicts: compare two trees of arrays under the report's tolerance.

A comparison passes when max |a - b| <= tol or ||a - b|| / ||b|| <= tol (the relative error of
the whole tree's norm), so near-zero entries cannot fail it alone and large ones cannot hide.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from comparisons.runs import to_numpy
from comparisons.verdicts import Check

# dtype -> tolerance on max |a - b| and on the relative error of the norm (docs/report_schema.md).
TOLERANCES = {"float32": 1e-5, "float64": 1e-12}


def flatten(tree: Any, prefix: str = "") -> dict[str, np.ndarray]:
    """{dotted path: numpy array} of a nested dict (or a single array at path `prefix`)."""
    if isinstance(tree, Mapping):
        flat: dict[str, np.ndarray] = {}
        for key, value in tree.items():
            flat.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    return {prefix: to_numpy(tree)}


def compare_trees(subject: str, compared: str, actual: Any, expected: Any, tol: float) -> Check:
    """A Check comparing two trees leaf by leaf (same paths and shapes required)."""
    a, e = flatten(actual), flatten(expected)
    if a.keys() != e.keys():
        missing, extra = sorted(e.keys() - a.keys()), sorted(a.keys() - e.keys())
        return Check(subject, compared, False, tolerance=tol,
                     detail=f"different leaves: missing {missing[:4]}, unexpected {extra[:4]}")
    shapes = [k for k in e if a[k].shape != e[k].shape]
    if shapes:
        k = shapes[0]
        return Check(subject, compared, False, tolerance=tol,
                     detail=f"{k}: shape {a[k].shape} vs {e[k].shape}")
    if not e:
        return Check(subject, compared, True, 0.0, 0.0, tol, "nothing to compare")
    diffs = {k: np.abs(a[k].astype(np.float64) - e[k].astype(np.float64)) for k in e}
    worst = max(diffs, key=lambda k: float(diffs[k].max(initial=0.0)))
    max_abs = float(diffs[worst].max(initial=0.0))
    diff_norm = np.sqrt(sum(float(np.sum(d ** 2)) for d in diffs.values()))
    ref_norm = np.sqrt(sum(float(np.sum(e[k].astype(np.float64) ** 2)) for k in e))
    # With a zero reference the relative error is undefined (None): only max |a - b| can pass.
    rel_norm = diff_norm / ref_norm if ref_norm > 0 else (0.0 if diff_norm == 0 else None)
    finite = all(np.all(np.isfinite(a[k])) for k in a)
    passed = finite and (max_abs <= tol or (rel_norm is not None and rel_norm <= tol))
    detail = f"worst leaf {worst or '(the whole output)'}" + ("" if finite else "; non-finite values")
    return Check(subject, compared, bool(passed), max_abs, None if rel_norm is None else float(rel_norm),
                 tol, detail)
