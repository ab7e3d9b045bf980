"""doctor_torch and doctor_jax, each loading its framework's doctor (and the framework) only when called."""
from __future__ import annotations

from typing import Any

from comparisons.doctor.findings import DoctorReport


def doctor_torch(module: Any, *inputs: Any, **options: Any) -> DoctorReport:
    """See `comparisons.doctor.torch_run.doctor_torch`."""
    from comparisons.doctor.torch_run import doctor_torch as run

    return run(module, *inputs, **options)


def doctor_jax(apply_fn: Any, variables: Any, *inputs: Any, **options: Any) -> DoctorReport:
    """See `comparisons.doctor.jax_probe.doctor_jax`."""
    from comparisons.doctor.jax_probe import doctor_jax as run

    return run(apply_fn, variables, *inputs, **options)
