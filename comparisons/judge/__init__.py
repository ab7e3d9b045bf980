"""Judging: arrays, placement maps and a pair's declarations in, `Check`s (verdicts) out.

    _numerics.py   compare_trees: two trees of arrays under a tolerance; TOLERANCES per dtype
    _placement.py  compare_placement, check_aliasing: where each layer lives, torch vs JAX
    _declared.py   one-sided leaves, unused parameters, known differences, given variables
    _runs.py       judge_runs: every verdict of one comparison's runs
    _padding.py    padding_notes: what uneven='pad' would change, measured (notes, never verdicts)

Above runs/ and placement/; harness/ and render/ build on it.
"""
from comparisons.judge._declared import checks as declared_checks
from comparisons.judge._declared import conversion_checks, cross
from comparisons.judge._declared import notes as declared_notes
from comparisons.judge._numerics import TOLERANCES, compare_trees, flatten
from comparisons.judge._padding import padding_notes
from comparisons.judge._placement import check_aliasing, compare_placement, layer_of
from comparisons.judge._runs import SUBJECTS, judge_runs, parametrisation_note

__all__ = ["SUBJECTS", "TOLERANCES", "check_aliasing", "compare_placement", "compare_trees", "conversion_checks",
           "cross", "declared_checks", "declared_notes", "flatten", "judge_runs", "layer_of", "padding_notes",
           "parametrisation_note"]
