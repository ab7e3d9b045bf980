"""comparisons: the referee. Runs model pairs through dp_torch and dp_jax and reports agreement.

    from comparisons import compare
    report = compare("cnn_bn", batch_size=10, devices=4)
    report.ok, report.render("table")

The folders are layers, each importing only its own layer and those below it: docs/architecture.md lists
them ("The import rule") and maps every module; tests/test_import_structure.py checks the rule. Importing
this package imports neither torch nor JAX; they load when a comparison needs them.
"""

from comparisons import render  # noqa: F401  (registers the report formats)
from comparisons._caches import clear_caches
from comparisons.doctor import doctor_jax, doctor_torch
from comparisons.errors import UsageError
from comparisons.harness import ComparisonError, compare
from comparisons.placement import PlacementMap, PlacementRecord, placement_of
from comparisons.verdicts import Check, ComparisonReport

__all__ = ["Check", "ComparisonError", "ComparisonReport", "PlacementMap", "PlacementRecord", "UsageError",
           "clear_caches", "compare", "doctor_jax", "doctor_torch", "placement_of"]
