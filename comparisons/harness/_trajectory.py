"""Whether a comparison records every training step (the drift per step), and the note when it cannot.

Recording keeps, per step, every parameter and gradient of torch's run, of each JAX strategy's and of the
two float64 runs: host memory that grows with the steps. Past TRAJECTORY_BYTES it is not recorded, and a note
says so and how to get it (fewer steps or strategies). Nothing here imports torch or JAX.
"""
from __future__ import annotations

import dataclasses

from comparisons.runs import RunInputs

TRAJECTORY_BYTES = 1 << 30  # 1 GiB of recorded steps at most


def with_trajectory(run: RunInputs, parameters: int, strategies: int, float64: bool) -> tuple[RunInputs, list[str]]:
    """`run` recording every step when it has two or more and the record fits; else unchanged, with a note."""
    steps = run.config.steps
    if steps < 2:
        return run, []
    per_value = 4 if run.config.dtype == "float32" else 8
    needed = steps * 2 * parameters * (per_value * (1 + strategies) + (16 if float64 else 0))
    if needed > TRAJECTORY_BYTES:
        return run, [f"drift per step not recorded: {steps} steps of {parameters} parameters and their gradients "
                     f"need {needed / 2**30:.1f} GiB for torch, {strategies} JAX strategies"
                     f"{' and the float64 runs' if float64 else ''} (more than {TRAJECTORY_BYTES / 2**30:.0f} GiB); "
                     "pass fewer steps or strategies to see it"]
    return dataclasses.replace(run, config=dataclasses.replace(run.config, trajectory=True)), []
