"""Every verdict of one comparison's runs: DP vs single per backend, torch vs each JAX strategy, the compiled
step vs the eager path, chunks, placement, aliasing and what the pair declares."""
from __future__ import annotations

from typing import Any

from comparisons.judge import _declared as declared
from comparisons.judge._numerics import compare_trees
from comparisons.judge._placement import check_aliasing, compare_placement
from comparisons.runs import BackendRun
from comparisons.verdicts import Check

SUBJECTS = ("outputs", "gradients", "batch_stats", "params_after_steps")


def judge_runs(pair: Any, runs: list[BackendRun], tol: float) -> list[Check]:
    """Every verdict on `runs` (torch's first, then one per JAX strategy) at tolerance `tol`."""
    torch_run, checks = runs[0], []
    for subject in SUBJECTS:
        if subject == "batch_stats" and not pair.has_batch_stats:
            continue
        for run in runs:
            checks.append(compare_trees(subject, f"{run.label} DP vs single", getattr(run.dp, subject),
                                        getattr(run.single, subject), tol))
        for run in runs[1:]:
            if subject == "params_after_steps" and run.parameter_count != torch_run.parameter_count:
                continue  # see parametrisation_note
            checks.append(compare_trees(subject, f"torch DP vs {run.label} DP",
                                        *declared.cross(pair, subject, getattr(run.dp, subject),
                                                        getattr(torch_run.dp, subject)), tol))
    checks += _compiled_vs_eager(runs, tol)
    for run in runs[1:]:
        checks.append(Check("chunks", f"torch vs {run.label}", run.chunk_sizes == torch_run.chunk_sizes,
                            detail=f"chunk sizes {run.chunk_sizes} vs torch {torch_run.chunk_sizes}"))
        checks.append(compare_placement(pair, torch_run.placement, run.placement, run.label,
                                        padded_replica=run.padded_replica))
    checks += [check_aliasing(run.placement, run.label) for run in runs
               if any(r.replica is not None and r.role == "param" for r in run.placement)]
    return checks + declared.checks(pair, runs, tol)


def _compiled_vs_eager(runs: list[BackendRun], tol: float) -> list[Check]:
    """dp_jax's compiled step (what trained) against its eager path (jax.grad around apply)."""
    return [compare_trees(subject, f"{run.label} compiled step vs eager", getattr(run.dp, subject),
                          getattr(run.eager, subject), tol)
            for run in runs if run.eager is not None for subject in ("gradients", "params_after_steps")]


def parametrisation_note(runs: list[BackendRun]) -> list[str]:
    """Why params_after_steps is not compared across backends, when the two sides count parameters apart."""
    torch_count, jax_count = runs[0].parameter_count, runs[-1].parameter_count
    if torch_count == jax_count:
        return []
    return [f"params_after_steps not compared across backends: torch trains {torch_count} parameters and "
            f"Flax {jax_count} (e.g. LSTM: torch's two biases per gate are one in Flax), so the same "
            "optimizer moves them differently; outputs and gradients are still compared"]
