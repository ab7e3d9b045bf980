"""The bench section of a report: every side's training step timed, once every check has passed.

Sides: torch on one device, dp_torch.DataParallel, stock torch.nn.DataParallel (CUDA devices only),
single-device jax.jit, each dp_jax strategy (eager apply + optax; the compiled train_step) and the
hand-written jit + NamedSharding floor. Each is a ratio to torch's DataParallel step (stock's where it
ran, else dp_torch's) and to the floor. docs/report_schema.md#bench describes the section.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from comparisons.bench._floor import floor_devices, sharded_train_step
from comparisons.bench._timing import Thunk, Timing, time_sides
from comparisons.runs import XLA_OPTIMIZE_ENV

FLOOR = "jax.jit + NamedSharding (floor)"
SINGLE_JAX = "jax.jit, one device"
STOCK = "torch.nn.DataParallel"
OURS = "dp_torch.DataParallel"
CPU_WORDS = ("on CPU devices these figures show overheads only (every replica shares the same cores); "
             "CUDA devices give absolute step times")


def refused(checks: Sequence[Any]) -> dict[str, Any]:
    """The section when a check failed: no figure, and why."""
    failed = sum(not check.passed for check in checks)
    return {"ran": False, "reason": f"no figure: {failed} of {len(checks)} checks failed, so the sides computed "
                                    "different things and their times would not compare the same work",
            "sides": [], "not_run": [], "notes": []}


def measure(run: Any, built: Any, devices: Any, strategies: Sequence[str], rounds: int, *,
            light: bool = False) -> dict[str, Any]:
    """Time every side of the comparison (`devices`: the harness's Devices) for `rounds` interleaved rounds,
    plus each side's first call; returns the report's `bench` section. `light`: the JAX programs were
    compiled light (XLA at -O0, the comparison's default on CPU), which a note says. Costs (rounds + 2)
    steps per side and one compile of the floor and of the single-device step."""
    from comparisons.runs import steps

    thunks = steps.torch_steps(run, built.torch, devices.torch, devices.reference, devices.kind)
    not_run = [] if STOCK in thunks else [{"side": STOCK, "why": _no_stock(devices.kind)}]
    for strategy in strategies:
        thunks.update(steps.jax_steps(run, built.flax, built.variables, devices.jax, strategy))
    floor = floor_devices(devices.jax, run.config.batch_size)
    thunks[SINGLE_JAX] = _floor_thunk(run, built, devices.jax[:1])
    thunks[FLOOR] = _floor_thunk(run, built, floor)
    timings = time_sides(thunks, rounds)
    notes = ([] if devices.kind == "cuda" else [CPU_WORDS]) + [
        "first call: the checks' runs compiled the strategies' programs already; the floor and the one-device "
        "jax.jit step compile on theirs"]
    if light:
        notes.append(f"every JAX side runs programs XLA compiled light (LLVM -O0), as the comparison compiles on "
                     f"CPU; ${XLA_OPTIMIZE_ENV}=full times fully optimised programs")
    if len(floor) < len(devices.jax):
        notes.append(f"the floor runs on {len(floor)} of the {len(devices.jax)} devices: NamedSharding splits a "
                     f"batch only evenly, and {run.config.batch_size} rows split evenly over {len(floor)}")
    return {"ran": True, "reason": None, "rounds": rounds, "absolute": devices.kind == "cuda",
            "torch_dp_side": STOCK if STOCK in timings else OURS, "machine": machine(devices),
            "sides": _rows(timings), "not_run": not_run, "notes": notes}


def _floor_thunk(run: Any, built: Any, devices: list) -> Thunk:
    """The floor (or, on one device, plain jax.jit) on the pair's loss and optimizer, as a thunk."""
    import jax

    from comparisons.runs import optax_optimizer, steps

    tx = optax_optimizer(run.config.optimizer)
    step = sharded_train_step(steps.single_grad(run, built.flax), tx, devices, run.config.dim)
    params = step.place(built.variables["params"])
    state = [params, step.place(tx.init(params)),
             step.place({k: v for k, v in built.variables.items() if k != "params"})]
    x = run.pair.to_flax_inputs(run.inputs)

    def thunk() -> None:
        *state[:], loss = step(*state, x, run.targets)
        jax.block_until_ready(loss)
    return thunk


def _rows(timings: dict[str, Timing]) -> list[dict[str, Any]]:
    torch_dp = timings.get(STOCK) or timings[OURS]
    floor = timings[FLOOR]
    return [{"side": side, "framework": "torch" if "torch" in side.split(",")[0] else "jax",
             "first_s": t.first_s, "compile_s": t.compile_s, "median_s": t.median_s, "min_s": t.min_s,
             "max_s": t.max_s, "vs_torch_dp": t.median_s / torch_dp.median_s, "vs_floor": t.median_s / floor.median_s}
            for side, t in timings.items()]


def _no_stock(kind: str) -> str:
    return (f"cannot run on {kind} devices: its scatter, broadcast and gather are CUDA's comm primitives "
            "(the CPU oracle in tests/torch_oracle.py is a test helper the package does not import)")


def machine(devices: Any) -> dict[str, Any]:
    """What the figures were measured on: both frameworks' devices, the cores and the load average."""
    first = devices.jax[0]
    torch_words = (f"{len(devices.torch)} x {devices.torch[0].type}" if devices.kind != "cuda"
                   else f"{len(devices.torch)} x {_cuda_name()}")
    return {"torch_devices": f"{devices.kind}: {torch_words}",
            "jax_devices": f"{len(devices.jax)} x {first.device_kind} ({first.platform})",
            "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
            "load_average": [round(load, 2) for load in os.getloadavg()]}


def _cuda_name() -> str:
    import torch

    return torch.cuda.get_device_name(0)
