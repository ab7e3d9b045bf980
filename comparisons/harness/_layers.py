"""The layer view in a comparison: when it runs, and what it writes into the report."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from comparisons import layers
from comparisons.judge import SUBJECTS
from comparisons.runs import RunInputs
from comparisons.verdicts import Check, ComparisonReport


def needs_layer_view(checks: Sequence[Check]) -> bool:
    """Whether a torch-vs-JAX numeric check failed: then the view is added without being asked for."""
    return any(not c.passed and c.subject in SUBJECTS and c.compared.startswith("torch DP vs jax") for c in checks)


def add_layer_view(report: ComparisonReport, run: RunInputs, devices: tuple[Sequence[Any], Sequence[Any]],
                   tol: tuple[float, float | None], float64: bool, *, asked: bool) -> None:
    """Fill `layer_view`, `first_divergence` and `replica_divergences` of `report` (every rendering shows them).

    Costs the view's forwards (layers.layer_view) and one forward per chunk per backend for the replicas.
    `asked`: the user asked for the view, so an error in it is raised; added on its own (a check failed), an
    error leaves the three fields null and a note that names it, and the verdicts stand."""
    try:
        _fill(report, run, devices, tol, float64)
    except Exception as error:  # noqa: BLE001 (a diagnostic added unasked must not hide the verdicts)
        if asked:
            raise
        report.layer_view = report.first_divergence = report.replica_divergences = None
        report.notes.append(f"layer view: could not run ({type(error).__name__}: {error}); the checks above stand; "
                            "compare(..., layers=True) raises it with its traceback")


def _fill(report: ComparisonReport, run: RunInputs, devices, tol, float64: bool) -> None:
    rtol, atol = tol
    view = layers.layer_view(run, report.checks, rtol=rtol, atol=atol, float64=float64)
    report.layer_view = view.row_dicts()
    report.first_divergence = view.first_divergence
    if view.missing_note():
        report.notes.append(view.missing_note())
    report.replica_divergences = layers.replica_divergences(run, *devices, rtol=rtol, atol=atol)
