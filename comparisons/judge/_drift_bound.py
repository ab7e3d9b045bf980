"""The drift per step measured as the checks measure: each gap over the bound the checks would judge it at
(docs/report_schema.md#drift), so 1 is the tolerance line and a passing run's steps stay below it.

Per leaf and entry, |a - b| / (atol + rtol |b|), the rule of judge/_leaves.py, at the leaf's own atol: derived
from its measured float32 rounding when the float64 runs recorded every step (each framework's float32 run
against its own float64 run at that step, the larger of the two), from its scale when not. The float64 runs'
gap is measured at float64's rtol and that rounding scaled to float64, as judge/_precision.py judges a port
difference, without the leaves whose gradient is rounding noise in both float64 runs (judged at float32's
bound alone there). Costs one more pass over each recorded step's trees.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from comparisons.judge._bounds import Bounds
from comparisons.judge._declared import cross
from comparisons.judge._leaves import leaf_atol
from comparisons.judge._numerics import TOLERANCES, flatten, subject_scale
from comparisons.judge._precision import larger, measured_rounding, noise_gradients
from comparisons.runs import Float64Reference, Trajectory

LINES = ("loss", "gradients", "params")
TO_FLOAT64 = float(np.finfo(np.float64).eps / np.finfo(np.float32).eps)  # float32 rounding, scaled to float64


def bound_ratio(actual: Any, expected: Any, bounds: Bounds, rounding: Mapping[str, float] | None = None,
                skip: frozenset[str] = frozenset()) -> float:
    """The largest |a - b| / (atol + rtol |b|) over the float leaves both trees share (`expected`, torch's, sets
    the scale), each at the atol the checks give it; 0.0 where the sides are equal (NaN/Inf at the same place
    too), inf where they differ against a bound of zero, NaN where one side alone is NaN; 0.0 for no leaf."""
    low, high = flatten(actual), flatten(expected)
    scale, ratios = subject_scale(high), []
    for path, b in high.items():
        a = low.get(path)
        if path in skip or a is None or a.shape != b.shape or not b.size or not np.issubdtype(b.dtype, np.floating):
            continue
        atol = bounds.atol if bounds.atol is not None else leaf_atol(
            b, bounds.rtol, scale, None if rounding is None else rounding.get(path))
        x, y = a.astype(np.float64), b.astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            ratio = np.abs(x - y) / (atol + bounds.rtol * np.abs(y))
        same = (x == y) | (np.isnan(x) & np.isnan(y))
        ratios.append(float(np.where(same, 0.0, ratio).max()))
    return math.nan if any(math.isnan(r) for r in ratios) else max(ratios, default=0.0)


def step_ratios(pair: Any, jax_steps: Trajectory, torch_steps: Trajectory, k: int, bounds: Bounds,
                reference: Float64Reference | None) -> dict[str, float]:
    """{loss, gradients, params, float64}: step k's gaps (the JAX run's `jax_steps` against torch's) over the
    checks' bounds; float64 is None without float64 runs that recorded every step."""
    trees = _trees(pair, jax_steps, torch_steps, k)
    in64, trees64 = _recorded(reference), None
    rounding = {line: None for line in LINES}
    if in64:
        trees64 = _trees(pair, reference.jax.trajectory, reference.torch.trajectory, k)
        rounding = {line: larger(measured_rounding(trees[line][1], trees64[line][1]),
                                 measured_rounding(trees[line][0], trees64[line][0])) for line in LINES}
    ratios = {line: bound_ratio(*trees[line], bounds, rounding[line]) for line in LINES}
    ratios["float64"] = _float64_ratio(pair, trees64, rounding, reference, bounds.rtol) if in64 else None
    return ratios


def _float64_ratio(pair: Any, trees64: dict, rounding: dict, reference: Float64Reference, rtol32: float) -> float:
    islands = "float32_islands" in pair.known_differences  # judged at float32's bound, as judge_cross does
    scale, rtol = (1.0, rtol32) if islands else (TO_FLOAT64, TOLERANCES["float64"])
    noise = noise_gradients(reference)
    ratios = [bound_ratio(*trees64[line], Bounds(rtol), {p: r * scale for p, r in rounding[line].items()},
                          skip=noise if line != "loss" else frozenset()) for line in LINES]
    return math.nan if any(math.isnan(r) for r in ratios) else max(ratios)


def _recorded(reference: Float64Reference | None) -> bool:
    return (reference is not None and reference.torch.trajectory is not None
            and reference.jax.trajectory is not None)


def _trees(pair: Any, jax_steps: Trajectory, torch_steps: Trajectory, k: int) -> dict[str, tuple[dict, dict]]:
    """{line: (JAX side, torch side)} of step k, without what the pair declares one-sided."""
    gradients = cross(pair, "gradients", jax_steps.gradients[k], torch_steps.gradients[k])
    return {"loss": ({"loss": np.asarray(jax_steps.losses[k])}, {"loss": np.asarray(torch_steps.losses[k])}),
            "gradients": (flatten(gradients.flax), flatten(gradients.torch)),
            "params": (flatten(jax_steps.params[k]), flatten(torch_steps.params[k]))}
