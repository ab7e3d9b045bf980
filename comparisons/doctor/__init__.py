"""`comparisons.doctor`: what DataParallel will not put on each device, found in the user's own model.

    from comparisons.doctor import doctor_torch, doctor_jax
    report = doctor_torch(model, torch.randn(8, 3))      # one DataParallel forward on 4 devices
    report.ok, report.render("table")

Importing this package imports neither torch nor JAX; each doctor loads its framework when called.
"""
from __future__ import annotations

from typing import Any

from comparisons.doctor import render  # noqa: F401  (registers the formats of DoctorReport.render)
from comparisons.doctor.findings import KINDS, DoctorReport, Finding

__all__ = ["KINDS", "DoctorReport", "Finding", "doctor_jax", "doctor_torch"]


def doctor_torch(module: Any, *inputs: Any, **options: Any) -> DoctorReport:
    """See `comparisons.doctor.torch_run.doctor_torch`."""
    from comparisons.doctor.torch_run import doctor_torch as run

    return run(module, *inputs, **options)


def doctor_jax(apply_fn: Any, variables: Any, *inputs: Any, **options: Any) -> DoctorReport:
    """See `comparisons.doctor.jax_probe.doctor_jax`."""
    from comparisons.doctor.jax_probe import doctor_jax as run

    return run(apply_fn, variables, *inputs, **options)
