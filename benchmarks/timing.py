"""Ratios measured within one run: A and B alternate, so machine load hits both alike.

A benchmark figure here is never one absolute time but the ratio tA/tB of two callables timed
back to back, repeated; we report the median and the spread (IQR, min-max) of the per-repetition
ratios, plus the median absolute times for context.
"""
from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

Thunk = Callable[[], Any]


@dataclass(frozen=True)
class Settings:
    """How hard to measure: `reps` repetitions of `samples` A/B pairs of about `target_s` seconds each.

    Taking the fastest sample per side filters preemption by other processes, which only ever
    slows a sample down; the spread over repetitions shows what is left.
    """

    reps: int = 9
    target_s: float = 0.05
    warmup: int = 3
    samples: int = 3  # per repetition each side keeps its fastest of this many timings


@dataclass(frozen=True)
class Ratio:
    """tA/tB over repetitions: median, quartiles, min, max, plus median seconds per call of each side."""

    median: float
    q1: float
    q3: float
    min: float
    max: float
    a_s: float
    b_s: float
    reps: int
    calls: int

    def as_dict(self) -> dict[str, float]:
        return asdict(self)

    def cell(self) -> str:
        """`1.03x [0.98-1.07]`: median and interquartile range."""
        return f"{self.median:.2f}x [{self.q1:.2f}-{self.q3:.2f}]"


def seconds_per_call(fn: Thunk, calls: int) -> float:
    """Wall time of `calls` calls of `fn` (which must block until its work is done), per call.

    The garbage collector is off while timing, as in `timeit`: a full collection of the large
    torch+JAX heap takes tens of milliseconds and would land on whichever side happened to trigger
    it; collections then run between timings instead.
    """
    gc.disable()
    try:
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - start) / calls
    finally:
        gc.enable()


def calls_for(fn: Thunk, target_s: float) -> int:
    """How many calls of `fn` take about `target_s` seconds (at least 1)."""
    calls = 1
    while True:
        elapsed = seconds_per_call(fn, calls) * calls
        if elapsed >= target_s / 4 or calls >= 1 << 16:
            return max(1, round(calls * target_s / max(elapsed, 1e-9)))
        calls *= 4


def fastest_pair(a: Thunk, b: Thunk, calls: int, samples: int, b_first: bool) -> tuple[float, float]:
    """(fastest A, fastest B) over `samples` back-to-back timings, alternating which side goes first."""
    best = [float("inf"), float("inf")]
    for sample in range(samples):
        order = (1, 0) if b_first == (sample % 2 == 0) else (0, 1)
        for side in order:
            best[side] = min(best[side], seconds_per_call((a, b)[side], calls))
    return best[0], best[1]


def quartiles(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return values[0], values[0]
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q3


def measure_ratio(a: Thunk, b: Thunk, settings: Settings) -> Ratio:
    """Time `a` against `b` alternately (AB, BA, AB ...) and summarise the per-repetition ratios.

    Both thunks are warmed up first (compiles happen there), and must block until done
    (e.g. end with `jax.block_until_ready`). Each side gets the same number of calls per repetition.
    """
    for _ in range(settings.warmup):
        a()
        b()
    calls = max(1, min(calls_for(a, settings.target_s), calls_for(b, settings.target_s)))
    ratios, a_times, b_times = [], [], []
    for rep in range(settings.reps):
        ta, tb = fastest_pair(a, b, calls, settings.samples, b_first=rep % 2 == 1)
        ratios.append(ta / tb)
        a_times.append(ta)
        b_times.append(tb)
    q1, q3 = quartiles(ratios)
    return Ratio(
        median=statistics.median(ratios), q1=q1, q3=q3, min=min(ratios), max=max(ratios),
        a_s=statistics.median(a_times), b_s=statistics.median(b_times), reps=settings.reps, calls=calls,
    )


def measure_shares(steps: dict[str, Thunk], settings: Settings) -> dict[str, dict[str, float]]:
    """Each step's share of their summed time, per repetition (steps run in rotating order).

    Returns {step: {"median", "min", "max", "s"}}: the share's median and range over repetitions,
    and the step's median seconds per call.
    """
    names = list(steps)
    for _ in range(settings.warmup):
        for name in names:
            steps[name]()
    calls = {name: calls_for(steps[name], settings.target_s / len(names)) for name in names}
    shares: dict[str, list[float]] = {name: [] for name in names}
    times: dict[str, list[float]] = {name: [] for name in names}
    for rep in range(settings.reps):
        order = names[rep % len(names):] + names[:rep % len(names)]
        rep_times = {name: min(seconds_per_call(steps[name], calls[name]) for _ in range(settings.samples))
                     for name in order}
        total = sum(rep_times.values())
        for name in names:
            shares[name].append(rep_times[name] / total)
            times[name].append(rep_times[name])
    return {
        name: {"median": statistics.median(shares[name]), "min": min(shares[name]),
               "max": max(shares[name]), "s": statistics.median(times[name])}
        for name in names
    }
