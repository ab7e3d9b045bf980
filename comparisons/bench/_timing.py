"""Time several training steps against each other: first call apart, then interleaved rounds.

Each side's first call (compiles, caches, allocations) is timed on its own and reported apart; one more
call warms it. Then `rounds` rounds, each timing one call of every side, the order rotating from round
to round so a burst of load lands on every side alike. The garbage collector is off while a call is
timed (as in `timeit`): a collection of the torch+JAX heap would land on whichever side triggered it.
"""
from __future__ import annotations

import dataclasses
import gc
import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

Thunk = Callable[[], Any]


@dataclasses.dataclass(frozen=True)
class Timing:
    """One side's seconds: its first call, and the median, min and max of its timed steps."""

    first_s: float
    median_s: float
    min_s: float
    max_s: float
    steps: int

    @property
    def compile_s(self) -> float:
        """The first call's cost beyond a steady step (compiling, caching, allocating); 0 when none."""
        return max(0.0, self.first_s - self.median_s)


def timed(thunk: Thunk) -> float:
    """Seconds of one call of `thunk` (which blocks until its work is done), the collector off."""
    gc.disable()
    try:
        start = time.perf_counter()
        thunk()
        return time.perf_counter() - start
    finally:
        gc.enable()


def time_sides(thunks: Mapping[str, Thunk], rounds: int) -> dict[str, Timing]:
    """{side: Timing} over `rounds` interleaved rounds (see the module docstring). Costs each side
    rounds + 2 steps, plus its compiles on the first."""
    names = list(thunks)
    first = {name: timed(thunks[name]) for name in names}
    for name in names:
        thunks[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(rounds):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(timed(thunks[name]))
    return {name: Timing(first[name], statistics.median(times[name]), min(times[name]), max(times[name]), rounds)
            for name in names}
