"""Is the port faster? Each side's training step timed, only once the comparison's checks have all passed.

    _measure.py  the report's `bench` section: the sides, their ratios, the machine; `refused` when a check failed
    _timing.py   the first call apart, then interleaved rounds: median, min and max per side
    _floor.py    the hand-written jax.jit + NamedSharding step (the floor), which benchmarks/ times too

Above runs/ (comparisons/runs/steps.py builds each side's step); the harness calls it after the verdicts.
Importing this package imports neither torch nor JAX.
"""
from comparisons.bench._floor import ShardedStep, floor_devices, sharded_train_step
from comparisons.bench._measure import CPU_WORDS, FLOOR, machine, measure, refused
from comparisons.bench._timing import Timing, time_sides, timed

__all__ = ["CPU_WORDS", "FLOOR", "ShardedStep", "Timing", "floor_devices", "machine", "measure", "refused",
           "sharded_train_step", "time_sides", "timed"]
