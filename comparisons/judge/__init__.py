"""Judging: arrays, placement maps and a pair's declarations in, `Check`s (verdicts) out.

    _bounds.py     Bounds (rtol, atol, cause): how numbers are judged; Sides (torch, flax): one value per side
    _leaves.py     judge_leaf: one leaf element by element at its own scale; the failure kinds
    _numerics.py   compare_trees: two trees, every leaf on its own; TOLERANCES (rtol) per dtype; hints
    _precision.py  judge_cross: float64 tells a port difference from rounding; measured_rounding
    _placement.py  compare_placement, check_aliasing: where each layer lives, torch vs JAX
    _declared.py   one-sided leaves, unused parameters, known differences, given variables
    _runs.py       judge_runs: every verdict of one comparison's runs
    _padding.py    padding_notes: what uneven='pad' would change, measured (notes, never verdicts)
    _padding_row.py padding_row_checks: torch's padding_idx row, taken out of the cross checks and measured
    _nnx_traps.py  nnx_traps: an NNX twin's settings unlike torch's; with_traps: failing leaves name them
    _drift.py      drift: the torch-vs-JAX gap per training step; classify_drift: rounding or jumps
    _drift_bound.py bound_ratio: each step's gap over the checks' own bound (the drift chart's measure)

Above runs/ and placement/; harness/ and render/ build on it.
"""
from comparisons.judge._bounds import Bounds, Sides
from comparisons.judge._declared import checks as declared_checks
from comparisons.judge._declared import conversion_checks, cross, island_checks
from comparisons.judge._declared import notes as declared_notes
from comparisons.judge._drift import classify as classify_drift
from comparisons.judge._drift import drift, drift_line, growth_per_step, relative_gap
from comparisons.judge._drift_bound import bound_ratio
from comparisons.judge._leaves import judge_leaf
from comparisons.judge._nnx_traps import NNXTrap, nnx_traps, with_traps
from comparisons.judge._numerics import TOLERANCES, compare_trees, flatten, judge_leaves, summarise
from comparisons.judge._padding import padding_notes
from comparisons.judge._padding_row import padding_row_checks
from comparisons.judge._placement import check_aliasing, compare_placement, layer_of
from comparisons.judge._precision import NOISE as NOISE_GRADIENT
from comparisons.judge._precision import judge_cross, larger, measured_rounding, noise_gradients
from comparisons.judge._runs import SUBJECTS, judge_runs, parametrisation_note

__all__ = ["NOISE_GRADIENT", "SUBJECTS", "TOLERANCES", "Bounds", "NNXTrap", "Sides", "bound_ratio", "check_aliasing",
           "classify_drift", "compare_placement", "compare_trees", "conversion_checks", "cross", "declared_checks",
           "declared_notes", "drift", "drift_line", "flatten", "growth_per_step", "island_checks", "judge_cross",
           "judge_leaf", "judge_leaves", "judge_runs", "larger", "layer_of", "measured_rounding", "noise_gradients",
           "nnx_traps", "padding_notes", "padding_row_checks", "parametrisation_note", "relative_gap", "summarise",
           "with_traps"]
