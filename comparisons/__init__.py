"""comparisons: the referee. Runs model pairs through dp_torch and dp_jax and reports agreement.

    from comparisons import compare
    report = compare("cnn_bn", batch_size=10, devices=4)
    report.ok, report.render("table")

Layers, each importing only those below it (tests/test_import_structure.py checks for cycles):
  verdicts              Check, ComparisonReport (imports nothing else of the package)
  placement             PlacementMap and placement_of (its walkers in _placement_walk)
  _numerics, _placement_checks   judging: arrays and placement maps -> Checks
  render/               table, JSON, Markdown, HTML; registers them for ComparisonReport.render
  harness               runs both backends (_runs, _torch_run, _jax_run, convert, models) and judges
  doctor/               doctor_torch / doctor_jax: what DataParallel will not put on each device, in a user's model
Importing this package imports neither torch nor JAX; they load when a comparison needs them.
"""
from comparisons import render  # noqa: F401  (registers the report formats)
from comparisons.doctor import doctor_jax, doctor_torch
from comparisons.harness import ComparisonError, compare
from comparisons.placement import PlacementMap, PlacementRecord, placement_of
from comparisons.verdicts import Check, ComparisonReport

__all__ = ["Check", "ComparisonError", "ComparisonReport", "PlacementMap", "PlacementRecord", "compare",
           "doctor_jax", "doctor_torch", "placement_of"]
