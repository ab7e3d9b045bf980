"""doctor_torch and doctor_jax, each loading its framework's doctor (and the framework) only when called."""
from __future__ import annotations

from typing import Any

from comparisons.doctor.findings import DoctorReport


def doctor_torch(module: Any, *inputs: Any, **options: Any) -> DoctorReport:
    """See `comparisons.doctor.torch_run.doctor_torch`."""
    from comparisons.doctor.torch_run import doctor_torch as run

    return run(module, *inputs, **options)


def doctor_jax(model_or_apply_fn: Any, *args: Any, **options: Any) -> DoctorReport:
    """`doctor_jax(nnx_model, *inputs)` for a bound Flax NNX module (`comparisons.doctor.nnx_probe.doctor_nnx`),
    else `doctor_jax(apply_fn, variables, *inputs)` for a function (`comparisons.doctor.jax_probe.doctor_jax`)."""
    from dp_jax.nnx import is_nnx_module

    if is_nnx_module(model_or_apply_fn):
        from comparisons.doctor.nnx_probe import doctor_nnx

        return doctor_nnx(model_or_apply_fn, *args, **options)
    from comparisons.doctor.jax_probe import doctor_jax as run

    if not args:
        from comparisons.errors import UsageTypeError

        raise UsageTypeError("doctor_jax: no variables; pass doctor_jax(apply_fn, variables, *inputs), or a bound "
                             "NNX module and its inputs, doctor_jax(model, *inputs)")
    return run(model_or_apply_fn, *args, **options)
