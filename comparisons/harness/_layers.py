"""The layer view in a comparison: when it runs, and what it writes into the report."""
from __future__ import annotations

from collections.abc import Sequence

from comparisons import layers
from comparisons.judge import SUBJECTS, Bounds, Sides
from comparisons.runs import RunInputs
from comparisons.verdicts import Check


def needs_layer_view(checks: Sequence[Check]) -> bool:
    """Whether a torch-vs-JAX numeric check failed: then the view is added without being asked for."""
    return any(not c.passed and c.subject in SUBJECTS and c.compared.startswith("torch DP vs jax") for c in checks)


def layer_view_fields(run: RunInputs, checks: Sequence[Check], devices: Sides, bounds: Bounds, float64: bool, *,
                      asked: bool) -> tuple[dict, list[str]]:
    """The report's `layer_view`, `first_divergence` and `replica_divergences` (every rendering shows them), and
    the notes the view adds. `devices`: each framework's device list; `bounds`: the comparison's.

    Costs the view's forwards (layers.layer_view) and one forward per chunk per backend for the replicas.
    `asked`: the user asked for the view, so an error in it is raised; added on its own (a check failed), an
    error leaves the three fields null and a note that names it, and the verdicts stand."""
    try:
        return _fields(run, checks, devices, bounds, float64)
    except Exception as error:  # noqa: BLE001 (a diagnostic added unasked must not hide the verdicts)
        if asked:
            raise
        return ({"layer_view": None, "first_divergence": None, "replica_divergences": None},
                [f"layer view: could not run ({type(error).__name__}: {error}); the checks above stand; "
                 "compare(..., layers=True) raises it with its traceback"])


def _fields(run: RunInputs, checks: Sequence[Check], devices: Sides, bounds: Bounds, float64: bool
            ) -> tuple[dict, list[str]]:
    view = layers.layer_view(run, checks, bounds=bounds, float64=float64)
    fields = {"layer_view": view.row_dicts(), "first_divergence": view.first_divergence,
              "replica_divergences": layers.replica_divergences(run, devices.torch, devices.flax, bounds=bounds)}
    return fields, [note for note in (view.missing_note(),) if note]
