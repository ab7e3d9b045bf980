"""comparisons: the referee. Runs model pairs through dp_torch and dp_jax and reports agreement.

    from comparisons import compare
    report = compare("cnn_bn", batch_size=10, devices=4)
    report.ok, report.render("table")

Folders by layer, lowest first; each imports only its own layer and those below it
(tests/test_import_structure.py checks it, and that a folder's `_private` modules stay inside it):
  errors, verdicts      UsageError (every refusal's base), Check, ComparisonReport
  placement/ convert/   where every tensor lives; weights torch <-> Flax, one rule per layer kind
  models/               ModelPair, the registry, the built-in pairs, derived mappings
  runs/                 one backend's run of a pair (torch_run, jax_run), its records and devices
  judge/                arrays and placement maps -> Checks
  harness/ render/      compare(); the report as table, JSON, Markdown, HTML
  cli/ distributed/ doctor/   the command line; DDP beside multi-process JAX; `comparisons doctor`
docs/architecture.md maps every module. Importing this package imports neither torch nor JAX; they
load when a comparison needs them.
"""

from comparisons import render  # noqa: F401  (registers the report formats)
from comparisons.doctor import doctor_jax, doctor_torch
from comparisons.errors import UsageError
from comparisons.harness import ComparisonError, compare
from comparisons.placement import PlacementMap, PlacementRecord, placement_of
from comparisons.verdicts import Check, ComparisonReport


def clear_caches() -> None:
    """Forget every compiled program and cached step a comparison keeps (comparisons' and dp_jax's).

    compare() caches its reference steps, compiled train steps and optimizer steps per model, loss and
    devices, so a second comparison of the same pair compiles nothing; they hold your modules and losses.
    After this call the next comparison compiles again. A no-op where no JAX run happened.
    """
    from comparisons.runs import clear_cached_programs

    clear_cached_programs()


__all__ = ["Check", "ComparisonError", "ComparisonReport", "PlacementMap", "PlacementRecord", "UsageError",
           "clear_caches", "compare", "doctor_jax", "doctor_torch", "placement_of"]
