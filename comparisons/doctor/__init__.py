"""`comparisons.doctor`: what DataParallel will not put on each device, found in the user's own model.

    from comparisons.doctor import doctor_torch, doctor_jax
    report = doctor_torch(model, torch.randn(8, 3))      # one DataParallel forward on 4 devices
    report.ok, report.render("table")

Importing this package imports neither torch nor JAX; each doctor loads its framework when called.
"""
from comparisons.doctor import render  # noqa: F401  (registers the formats of DoctorReport.render)
from comparisons.doctor._entry import doctor_jax, doctor_torch
from comparisons.doctor.findings import KINDS, DoctorReport, Finding

__all__ = ["KINDS", "DoctorReport", "Finding", "doctor_jax", "doctor_torch"]

