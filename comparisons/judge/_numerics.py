"""Numeric verdicts: two trees of arrays, every leaf judged on its own (judge/_leaves.py has the rule).

A check passes only if every leaf passes: a missing or extra leaf fails it, and no norm over the
whole tree rescues a leaf. `rel_norm` (||a - b|| / ||b|| over the tree) is still reported, as a figure.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from comparisons.judge._bounds import Bounds
from comparisons.judge._leaves import judge_leaf, leaf_atol
from comparisons.runs import to_numpy
from comparisons.verdicts import Check, Leaf

# dtype -> the default rtol (docs/report_schema.md#leaves).
TOLERANCES = {"float32": 1e-5, "float64": 1e-12}


def flatten(tree: Any, prefix: str = "") -> dict[str, np.ndarray]:
    """{dotted path: numpy array} of a nested dict (or a single array at path `prefix`).

    A complex leaf becomes two, `path.real` and `path.imag`, so each part is judged at its own scale: numpy's
    float casts would keep the real part alone and pass a twin whose imaginary part is wrong.
    """
    if isinstance(tree, Mapping):
        flat: dict[str, np.ndarray] = {}
        for key, value in tree.items():
            flat.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    array = to_numpy(tree)
    if np.iscomplexobj(array):
        return {f"{prefix}.real" if prefix else "real": array.real, f"{prefix}.imag" if prefix else "imag": array.imag}
    return {prefix: array}


def subject_scale(tree: Mapping[str, np.ndarray]) -> float:
    """The largest finite |x| of a flattened tree (0.0 if none)."""
    peaks = [float(np.abs(x).max(initial=0.0, where=np.isfinite(x))) for x in tree.values()
             if x.size and np.issubdtype(x.dtype, np.number)]
    return max(peaks, default=0.0)


def judge_leaves(actual: Any, expected: Any, bounds: Bounds, *, rounding: Mapping[str, float] | None = None,
                 sides: tuple[str, str] = ("actual", "expected")) -> tuple[list[Leaf], float | None]:
    """Every leaf's verdict (missing and extra ones too) and the tree's relative norm, for `compare_trees`
    (`bounds.cause` is not written here)."""
    tol, atol = bounds.rtol, bounds.atol
    a, e = flatten(actual), flatten(expected)
    scale = subject_scale(e)
    leaves = [Leaf(path, None, None, False, kind="missing", message=f"`{path}` is in {sides[1]} but not in "
                   f"{sides[0]}") for path in e if path not in a]
    leaves += [Leaf(path, None, None, False, kind="extra", message=f"`{path}` is in {sides[0]} but not in "
                    f"{sides[1]}") for path in a if path not in e]
    for path in (p for p in e if p in a):
        bound = atol if atol is not None else leaf_atol(
            e[path], tol, scale, None if rounding is None else rounding.get(path))
        leaves.append(judge_leaf(path or "(the whole output)", a[path], e[path], rtol=tol, atol=bound, sides=sides))
    return leaves, _rel_norm(a, e)


def _rel_norm(a: dict, e: dict) -> float | None:
    pairs = [(a[k].astype(np.float64), e[k].astype(np.float64)) for k in e
             if k in a and a[k].shape == e[k].shape]
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.sqrt(sum(float(np.sum((x - y) ** 2)) for x, y in pairs))
        ref = np.sqrt(sum(float(np.sum(y ** 2)) for _, y in pairs))
    if not np.isfinite(diff) or not np.isfinite(ref):
        return None
    return float(diff / ref) if ref > 0 else (0.0 if diff == 0 else None)


def compare_trees(subject: str, compared: str, actual: Any, expected: Any, bounds: Bounds, *,
                  rounding: Mapping[str, float] | None = None, sides: tuple[str, str] = ("actual", "expected")
                  ) -> Check:
    """A Check on two trees, leaf by leaf, each at its own scale, under `bounds` (its rtol, its atol: one bound
    on entries near zero for every leaf, else derived per leaf; its cause on every leaf that differs).

    Args:
      rounding: {path: measured float32 rounding} for the derived atol (judge/_leaves.py).
      sides: the actual and the expected side's names, for the messages.
    """
    leaves, rel_norm = judge_leaves(actual, expected, bounds, rounding=rounding, sides=sides)
    cause = bounds.cause
    if cause is not None:
        leaves = [with_cause(leaf, "rounding" if cause == "port" and leaf.passed else cause) for leaf in leaves]
    leaves = [hint(subject, leaf, sides) for leaf in leaves]
    return summarise(subject, compared, leaves, rel_norm, bounds.rtol)


def with_cause(leaf: Leaf, cause: str | None) -> Leaf:
    """`leaf` with `cause` when it differs at all (a bitwise-equal leaf has no cause)."""
    return dataclasses.replace(leaf, cause=cause) if leaf.max_abs != 0 or not leaf.passed else leaf


def hint(subject: str, leaf: Leaf, sides: tuple[str, str]) -> Leaf:
    """`leaf` with its message pointing at the likely fix (docs/porting.md#reading-a-verdict)."""
    jax_side = next((side for side in sides if side.startswith("jax")), None)
    if jax_side is None or leaf.passed:
        return leaf
    extra = ""
    if leaf.kind == "zero" and subject == "gradients" and f"zero in {jax_side}" in leaf.message:
        extra = (f"no gradient reaches `{leaf.path}` in {jax_side}: a jax.lax.stop_gradient on it, or a parameter "
                 "the Flax model's loss never reaches")
    elif leaf.kind == "missing" and "." in leaf.path:
        layer, name = leaf.path.rsplit(".", 1)
        extra = (f"the Flax `{layer}` has no {name}: use_bias=False?" if name == "bias"
                 else f"the Flax `{layer}` has no `{name}`: a parameter the torch layer has and the Flax one lacks")
    return dataclasses.replace(leaf, message=f"{leaf.message}; {extra}") if extra else leaf


def summarise(subject: str, compared: str, leaves: list[Leaf], rel_norm: float | None, rtol: float,
              cause: str | None = None) -> Check:
    """The Check of judged leaves: passed when each passed; detail names every failing leaf (first 4). Its
    cause, unless given: "port" when a leaf is a port difference, else "rounding" when one differs by rounding."""
    failing = [leaf for leaf in leaves if not leaf.passed]
    if cause is None:
        causes = {leaf.cause for leaf in leaves}
        cause = next((c for c in ("port", "rounding") if c in causes), None)
    figures = [leaf.max_abs for leaf in leaves if leaf.max_abs is not None]
    max_abs = max(figures, default=None)
    if not leaves:
        return Check(subject, compared, True, 0.0, 0.0, rtol, "nothing to compare")
    if failing:
        shown = "; ".join(leaf.message for leaf in failing[:4])
        more = f" (+{len(failing) - 4} more failing leaves)" if len(failing) > 4 else ""
        detail = f"{len(failing)} of {len(leaves)} leaves fail: {shown}{more}"
    else:
        worst = max(leaves, key=lambda leaf: (leaf.max_abs or 0.0) / leaf.atol if leaf.atol else (leaf.max_abs or 0.0))
        detail = (f"{len(leaves)} leaves; closest to its bound: {worst.path} |Δ| {worst.max_abs or 0.0:.3g} "
                  f"(atol {worst.atol or 0.0:.2g}, rtol {rtol:g})")
    return Check(subject, compared, not failing, max_abs, rel_norm, rtol, detail, tuple(leaves), cause)
