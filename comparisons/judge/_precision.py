"""float64 tells a port difference from rounding (docs/report_schema.md#causes).

Each framework's float32 single-device run is measured against its own float64 run: that is the
computation's rounding, leaf by leaf. A torch-vs-JAX leaf is then judged twice:
- in float64 (both frameworks' float64 runs), at float64's rtol and the measured rounding scaled to
  float64 (x eps64 / eps32): beyond it, the difference is the port's (**port**) and fails whatever
  the float32 figure says;
- in float32, the run's own figure, at the rtol and an atol that grows with the measured rounding: a
  leaf that agrees in float64 differs by **rounding**, and fails only beyond that bound.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from comparisons.judge._bounds import Bounds, Sides
from comparisons.judge._numerics import TOLERANCES, flatten, hint, judge_leaves, subject_scale, summarise, with_cause
from comparisons.verdicts import Check, Leaf

_TO_FLOAT64 = float(np.finfo(np.float64).eps / np.finfo(np.float32).eps)


def measured_rounding(float32_tree: Any, float64_tree: Any) -> dict[str, float]:
    """{path: max |x32 - x64|} over the leaves both trees have with one shape (finite entries only)."""
    low, high = flatten(float32_tree), flatten(float64_tree)
    found = {}
    for path, x in low.items():
        y = high.get(path)
        if y is None or y.shape != x.shape or not np.issubdtype(x.dtype, np.floating):
            continue
        diff = np.abs(x.astype(np.float64) - y.astype(np.float64))
        found[path] = float(diff.max(initial=0.0, where=np.isfinite(diff)))
    return found


def larger(*roundings: Mapping[str, float]) -> dict[str, float]:
    """Per path, the larger rounding of the frameworks compared (a path either lacks is left out)."""
    shared = set.intersection(*(set(r) for r in roundings)) if roundings else set()
    return {path: max(r[path] for r in roundings) for path in shared}


def judge_cross(subject: str, float32: Sides, float64: Sides, bounds: Bounds, *,
                rounding: Mapping[str, float], labels: Sides, float32_islands: bool = False,
                noise: frozenset[str] = frozenset()) -> Check:
    """A torch-vs-JAX check with a cause on each leaf that differs: the JAX side's tree judged against torch's in
    float32 under `bounds` and in float64, `rounding` the larger measured float32 rounding per path, `labels`
    each side's name in the messages (and the check's `compared`: "torch DP vs jax:pmap DP"). With
    `float32_islands` (a declared known difference: part of the model stays float32 in the float64 runs) the
    float64 runs are judged at the float32 bound, which still catches a port difference beyond it. `noise`:
    leaves whose gradient is rounding noise in both float64 runs (`noise_gradients`), where float64 cannot tell
    a port from rounding: judged at the float32 bound alone."""
    sides = (labels.flax, labels.torch)
    in32, rel_norm = judge_leaves(float32.flax, float32.torch, Bounds(bounds.rtol, bounds.atol), rounding=rounding,
                                  sides=sides)
    sides64 = ("jax float64", "torch float64")
    scale, rtol64 = (1.0, bounds.rtol) if float32_islands else (_TO_FLOAT64, TOLERANCES["float64"])
    if float32_islands:  # an island may also return float32 (GPT-J's torch logits): weigh values, not dtypes
        float64 = Sides(*({path: np.asarray(leaf, np.float64) if np.issubdtype(np.asarray(leaf).dtype, np.floating)
                           else leaf for path, leaf in flatten(tree).items()} for tree in float64))
    scaled = {path: r * scale for path, r in rounding.items()}
    in64, _ = judge_leaves(float64.flax, float64.torch, Bounds(rtol64), rounding=scaled, sides=sides64)
    by_path = {leaf.path: hint(subject, leaf, sides64) for leaf in in64}
    leaves = [_noise_cause(leaf) if leaf.path in noise else _cause(hint(subject, leaf, sides), by_path.get(leaf.path))
              for leaf in in32]
    return summarise(subject, f"{labels.torch} vs {labels.flax}", leaves, rel_norm, bounds.rtol)


NOISE = 1e-10  # a float64 gradient below this fraction of the subject's largest is zero in exact arithmetic
NOISE_WORDS = ("its gradient is rounding noise in both frameworks' float64 runs (zero in exact arithmetic: a bias "
               "before a normalisation), which an optimizer such as Adam scales up, so float64 cannot tell a port "
               "difference from rounding here; judged at the float32 bound")


def noise_gradients(reference: Any) -> frozenset[str]:
    """The gradient leaves (dotted paths) at rounding-noise level in both frameworks' float64 runs: every entry
    below NOISE x the largest |gradient| of its own run (`reference`: a Float64Reference)."""
    torch64, jax64 = flatten(reference.torch.gradients), flatten(reference.jax.gradients)
    scales = [subject_scale(tree) for tree in (torch64, jax64)]
    return frozenset(path for path in torch64 if path in jax64 and all(
        np.size(tree[path]) and float(np.abs(tree[path]).max()) <= NOISE * scale
        for tree, scale in zip((torch64, jax64), scales)))


def _noise_cause(leaf: Leaf) -> Leaf:
    if leaf.passed:
        words = leaf.message or f"`{leaf.path}`: {NOISE_WORDS}"
        return dataclasses.replace(with_cause(leaf, "rounding"), message=words)
    return dataclasses.replace(leaf, message=f"{leaf.message}; {NOISE_WORDS}")


def _cause(leaf: Leaf, in64: Leaf | None) -> Leaf:
    if in64 is None or leaf.kind in ("shape", "dtype", "missing", "extra"):
        return leaf  # nothing to weigh: the structure differs, or float64 has no such leaf
    if not in64.passed:
        return dataclasses.replace(leaf, passed=False, cause="port", kind=in64.kind,
                                   message=f"port: {in64.message} (float32 |Δ| {leaf.max_abs or 0.0:.3g})")
    if leaf.passed:
        return with_cause(leaf, "rounding")
    return dataclasses.replace(leaf, cause="rounding",
                               message=f"rounding: agrees in float64 (|Δ| {in64.max_abs or 0.0:.3g}) but in float32 "
                                       f"{leaf.message}, beyond the measured rounding bound")
