"""The bench's own overhead: its figure for the hand-written JAX step (the floor) is within 10% of benchmarks'
figure for the same step, measured in the same run. A ratio of two timings, never a wall-clock bound."""
from __future__ import annotations

import statistics

import numpy as np
import optax
import pytest

from benchmarks.models import flax_model_and_batch
from benchmarks.timing import Settings, measure_ratio
from benchmarks.train_step import _targets, dp_jax_step, plain_jax_step
from comparisons.bench import time_sides

pytestmark = pytest.mark.slow


def test_the_bench_times_the_floor_as_benchmarks_does():
    import jax

    devices = jax.devices()[:4]
    width = int(np.random.default_rng().choice([128, 256]))
    model, variables, x = flax_model_and_batch(width, 64, devices[0])
    x, y, tx = np.asarray(x), _targets(64), optax.sgd(0.01, momentum=0.9)
    floor = plain_jax_step(model, variables, x, y, devices, tx)
    _, ours = dp_jax_step(model, variables, x, y, devices, tx)
    ratios = []
    for _ in range(3):  # interleaved: the machine's load hits both figures alike
        theirs = measure_ratio(ours, floor, Settings(reps=5, target_s=0.02, warmup=1)).b_s
        bench = time_sides({"floor": floor}, rounds=30)["floor"].median_s
        ratios.append(bench / theirs)
    print("bench/benchmarks floor ratios", ratios)
    assert abs(statistics.median(ratios) - 1) <= 0.10, ratios
