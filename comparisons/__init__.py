"""comparisons: the referee. Runs model pairs through dp_torch and dp_jax and reports agreement.

    from comparisons import compare
    report = compare("cnn_bn", batch_size=10, devices=4)
    report.ok, report.render("table")

Importing this package imports neither torch nor JAX; they load when a comparison needs them.
"""
from comparisons.harness import ComparisonError, compare
from comparisons.placement import PlacementMap, PlacementRecord, placement_of
from comparisons.report import Check, ComparisonReport

__all__ = ["Check", "ComparisonError", "ComparisonReport", "PlacementMap", "PlacementRecord", "compare",
           "placement_of"]
