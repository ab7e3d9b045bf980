"""The bench of a multi-process comparison: DDP's step beside the multi-process JAX step, once every check passed.

After the checks, each side is launched once more on its own (DDP's P ranks, then the P JAX processes), so no
timed step shares the cores with the other side or with the parent's one-process references. Each worker
trains its K steps again (its first training step timed: compiles, DDP's buckets), then one warm-up step
and N timed steps, a barrier before each so the ranks start together (`time_steps`). The parent keeps, per
step, the slowest rank's seconds (`slowest`): a data-parallel step ends when its last rank does. Rows and
rendering are the single-process bench's (comparisons/bench, comparisons/render/bench.py); there is no floor
across processes, so `vs_floor` is null. Standard library only: workers import it before torch or JAX.
"""
from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Sequence
from typing import Any

from comparisons.bench import CPU_WORDS, Timing, refused, timed

DDP = "torch DistributedDataParallel"
JAX = "jax multi-process, dp_jax train_step"
SIDE_NAMES = {"torch": DDP, "jax": JAX}


def time_steps(step: Callable[[], Any], barrier: Callable[[], Any], steps: int, first_s: float) -> dict[str, Any]:
    """A worker's figures: `first_s` (its first training step) and the seconds of `steps` calls of `step` (which
    blocks until its work is done), after one warm-up call, each after `barrier` (all ranks reach it)."""
    barrier()
    step()
    times = []
    for _ in range(steps):
        barrier()
        times.append(timed(step))
    return {"first_s": first_s, "times": times}


def slowest(ranks: Sequence[dict[str, Any]]) -> Timing:
    """One side's Timing from its ranks' `time_steps` figures: per step the slowest rank's seconds."""
    per_step = [max(times) for times in zip(*(rank["times"] for rank in ranks), strict=True)]
    first = max(rank["first_s"] for rank in ranks)
    return Timing(first, statistics.median(per_step), min(per_step), max(per_step), len(per_step))


def section(checks: Sequence[Any], timings: dict[str, Timing] | None, processes: int, devices: int
            ) -> dict[str, Any]:
    """The report's `bench` section (docs/report_schema.md#bench): `refused` when a check failed (then
    `timings` is None: nothing was launched), else a row per side, `vs_torch_dp` against DDP."""
    if timings is None or not all(check.passed for check in checks):
        return refused(checks)
    ddp = timings.get("torch")
    rows = [{"side": SIDE_NAMES[side], "framework": side, "first_s": t.first_s, "compile_s": t.compile_s,
             "median_s": t.median_s, "min_s": t.min_s, "max_s": t.max_s,
             "vs_torch_dp": t.median_s / ddp.median_s if ddp else None, "vs_floor": None}
            for side, t in timings.items()]
    rounds = next(iter(timings.values())).steps
    notes = [CPU_WORDS, "each side timed in its own launch after the checks passed: the slowest rank per step; "
                        "first call: the worker's first training step (compiles, DDP's bucket set-up)",
             "no floor across processes: the hand-written jax.jit + NamedSharding step runs in one process only"]
    return {"ran": True, "reason": None, "rounds": rounds, "absolute": False, "torch_dp_side": DDP if ddp else None,
            "machine": machine(processes, devices), "sides": rows, "not_run": [], "notes": notes}


def machine(processes: int, devices: int) -> dict[str, Any]:
    """The single-process bench's machine fields for P ranks and P processes x D devices, and `processes`."""
    return {"torch_devices": f"cpu: {processes} DDP rank(s) (gloo), one CPU each",
            "jax_devices": f"{processes} process(es) x {devices} cpu device(s), one mesh of {processes * devices}",
            "processes": processes,
            "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
            "load_average": [round(load, 2) for load in os.getloadavg()]}
