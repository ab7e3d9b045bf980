"""Every verdict of one comparison's runs: DP vs single per backend, torch vs each JAX strategy, the compiled
step vs the eager path, chunks, placement, aliasing and what the pair declares.

With a float64 reference (`Float64Reference`), each leaf's bound grows with its measured float32 rounding and
every torch-vs-JAX leaf that differs gets a cause, port or rounding (judge/_precision.py).
"""
from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

from comparisons.judge import _declared as declared
from comparisons.judge._bounds import Bounds, Sides
from comparisons.judge._numerics import compare_trees
from comparisons.judge._placement import check_aliasing, compare_placement
from comparisons.judge._precision import judge_cross, larger, measured_rounding, noise_gradients
from comparisons.runs import BackendRun, Float64Reference
from comparisons.verdicts import Check

SUBJECTS = ("outputs", "gradients", "batch_stats", "params_after_steps")


def judge_runs(pair: Any, runs: list[BackendRun], bounds: Bounds, reference: Float64Reference | None = None,
               inputs: tuple | None = None) -> list[Check]:
    """Every verdict on `runs` (torch's first, then one per JAX strategy) under `bounds` (its cause: what a
    torch-vs-JAX leaf that differs is blamed on without a float64 `reference`, "port" when the run is float64);
    `inputs`, the runs' inputs, tell a declared padding row's difference explained or not."""
    torch_run, checks = runs[0], []
    tol = _Judged(bounds, reference, noise_gradients(reference) if reference is not None else frozenset())
    for subject in SUBJECTS:
        if subject == "batch_stats" and not pair.has_batch_stats:
            continue
        rounding = {run.label: _rounding(run, subject, tol.reference) for run in runs}
        for run in runs:
            checks.append(compare_trees(subject, f"{run.label} DP vs single", getattr(run.dp, subject),
                                        getattr(run.single, subject), bounds._replace(cause="data_parallel"),
                                        rounding=rounding[run.label], sides=(f"{run.label} DP", f"{run.label} single")))
        for run in runs[1:]:
            if subject == "params_after_steps" and run.parameter_count != torch_run.parameter_count:
                continue  # see parametrisation_note
            checks.append(_cross(pair, subject, torch_run, run, tol, rounding))
    checks = _where_next(checks) + _compiled_vs_eager(runs, tol)
    for run in runs[1:]:
        checks.append(Check("chunks", f"torch vs {run.label}", run.chunk_sizes == torch_run.chunk_sizes,
                            detail=f"chunk sizes {run.chunk_sizes} vs torch {torch_run.chunk_sizes}"))
        checks.append(compare_placement(pair, torch_run.placement, run.placement, run.label,
                                        padded_replica=run.padded_replica))
    checks += [check_aliasing(run.placement, run.label) for run in runs
               if any(r.replica is not None and r.role == "param" for r in run.placement)]
    return (checks + declared.checks(pair, runs, bounds.rtol, inputs)
            + declared.island_checks(pair, runs, reference, checks))


class _Judged(NamedTuple):
    """The bounds of one comparison, its float64 reference (None without one) and the gradient leaves that are
    rounding noise in both float64 runs (`noise_gradients`, measured once), as its checks read them."""

    bounds: Bounds
    reference: Float64Reference | None
    noise: frozenset[str] = frozenset()


def _where_next(checks: list[Check]) -> list[Check]:
    """A failing torch-vs-JAX outputs check whose gradients all agree says where to look next."""
    grads = {c.compared: c.passed for c in checks if c.subject == "gradients"}
    return [dataclasses.replace(c, detail=c.detail + "; every parameter gradient agrees, so the forward differs "
                                "where no parameter is: an activation or the output's post-processing after the "
                                "last layer (compare each layer's output, torch against Flax, to find it)")
            if c.subject == "outputs" and not c.passed and grads.get(c.compared) else c for c in checks]


def _rounding(run: BackendRun, subject: str, reference: Float64Reference | None) -> dict[str, float] | None:
    """The run's measured float32 rounding per leaf of `subject` (its single-device run against float64)."""
    if reference is None:
        return None
    return measured_rounding(getattr(run.single, subject), getattr(reference.torch if run.label == "torch"
                                                                    else reference.jax, subject))


def _cross(pair: Any, subject: str, torch_run: BackendRun, run: BackendRun, tol: _Judged, rounding: dict) -> Check:
    compared, labels = f"torch DP vs {run.label} DP", Sides(torch="torch DP", flax=f"{run.label} DP")
    float32 = declared.cross(pair, subject, getattr(run.dp, subject), getattr(torch_run.dp, subject))
    if tol.reference is None:
        return compare_trees(subject, compared, float32.flax, float32.torch, tol.bounds,
                             sides=(labels.flax, labels.torch))
    float64 = declared.cross(pair, subject, getattr(tol.reference.jax, subject), getattr(tol.reference.torch, subject))
    noise = tol.noise if subject in ("gradients", "params_after_steps") else frozenset()
    return judge_cross(subject, float32, float64, tol.bounds,
                       rounding=larger(rounding["torch"], rounding[run.label]), labels=labels,
                       float32_islands="float32_islands" in pair.known_differences, noise=noise)


def _compiled_vs_eager(runs: list[BackendRun], tol: _Judged) -> list[Check]:
    """dp_jax's compiled step (what trained) against its eager path (jax.grad around apply)."""
    return [compare_trees(subject, f"{run.label} compiled step vs eager", getattr(run.dp, subject),
                          getattr(run.eager, subject), tol.bounds._replace(cause=None),
                          rounding=_rounding(run, subject, tol.reference),
                          sides=(f"{run.label} compiled", f"{run.label} eager"))
            for run in runs if run.eager is not None for subject in ("gradients", "params_after_steps")]


def parametrisation_note(runs: list[BackendRun]) -> list[str]:
    """Why params_after_steps is not compared across backends, when the two sides count parameters apart."""
    torch_count, jax_count = runs[0].parameter_count, runs[-1].parameter_count
    if torch_count == jax_count:
        return []
    return [f"params_after_steps and the drift per step not compared across backends: torch trains {torch_count} "
            f"parameters and Flax {jax_count} (e.g. LSTM: torch's two biases per gate are one in Flax), so the same "
            "optimizer moves them differently; outputs and gradients are still compared"]
