"""Each framework's float32 rounding is measured against its OWN float64 run (judge/_runs.py), never the other
framework's: against the other's, a port gap between the two float64 runs reads as rounding, so the bound of
every check that leaf feeds grows by the port gap and a data-parallel bug smaller than it passes unseen
(a mutation round's survivor, issue 35)."""
from __future__ import annotations

import numpy as np
from _twins import make
from hypothesis import given, settings
from hypothesis import strategies as st

from comparisons.judge import Bounds, judge_runs, measured_rounding
from comparisons.placement import PlacementMap
from comparisons.runs import BackendRun, Float64Reference, Snapshot

PAIR = make("gelu_by_hand")
SUBJECTS = ("outputs", "gradients", "params_after_steps")


def snapshot(tree: dict) -> Snapshot:
    return Snapshot(outputs={"out": tree["w"]}, gradients=tree, batch_stats={}, params_after_steps=tree)


def run(label: str, dp: dict, single: dict) -> BackendRun:
    return BackendRun(label, snapshot(dp), snapshot(single), PlacementMap(()), [4, 4], 1)


def float32(tree: dict, rng: np.random.Generator, size: float) -> dict:
    """`tree` with a drawn float32 rounding of about `size` per entry."""
    return {p: (x + size * rng.standard_normal(x.shape)).astype(np.float32) for p, x in tree.items()}


def dp_verdicts(seed: int, port_gap: float, dp_bug_in: str | None) -> dict[str, bool]:
    """{compared: passed} of the DP-vs-single gradients checks, on runs whose float64 runs differ by `port_gap`
    and whose `dp_bug_in` run ("torch" or "jax:explicit") has a data-parallel difference of 1e-3."""
    rng = np.random.default_rng(seed)
    torch64 = {"w": rng.standard_normal(16) + 2.0}
    jax64 = {"w": torch64["w"] + port_gap * rng.choice([-1.0, 1.0], 16)}
    torch32, jax32 = float32(torch64, rng, 1e-7), float32(jax64, rng, 3e-7)  # each framework rounds its own way
    bug = {"w": np.zeros(16, np.float32)}
    bug["w"][int(rng.integers(16))] = 1e-3
    runs = [run(label, {"w": single["w"] + (bug["w"] if label == dp_bug_in else 0)}, single)
            for label, single in (("torch", torch32), ("jax:explicit", jax32))]
    checks = judge_runs(PAIR, runs, Bounds(1e-5), Float64Reference(snapshot(torch64), snapshot(jax64)))
    return {c.compared: c.passed for c in checks if c.subject == "gradients" and c.compared.endswith("vs single")}


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), port_gap=st.sampled_from([0.0, 1e-2, 1e-1]),
       dp_bug_in=st.sampled_from([None, "torch", "jax:explicit"]))
def test_a_data_parallel_bug_fails_whatever_port_gap_lies_between_the_float64_runs(seed, port_gap, dp_bug_in):
    verdicts = dp_verdicts(seed, port_gap, dp_bug_in)
    assert verdicts == {f"{label} DP vs single": label != dp_bug_in for label in ("torch", "jax:explicit")}, (
        port_gap, dp_bug_in)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_each_leaf_bound_grows_with_its_own_frameworks_rounding_only(seed):
    rng = np.random.default_rng(seed)
    torch64 = {"w": rng.standard_normal(16)}
    jax64 = {"w": torch64["w"] + 0.05}  # a port gap between the float64 runs
    torch32, jax32 = float32(torch64, rng, 1e-7), float32(jax64, rng, 4e-7)
    runs = [run("torch", torch32, torch32), run("jax:explicit", jax32, jax32)]
    checks = judge_runs(PAIR, runs, Bounds(1e-5), Float64Reference(snapshot(torch64), snapshot(jax64)))
    for label, own32, own64 in (("torch", torch32, torch64), ("jax:explicit", jax32, jax64)):
        (check,) = [c for c in checks if c.subject == "gradients" and c.compared == f"{label} DP vs single"]
        (leaf,) = check.leaves
        own = measured_rounding(own32, own64)["w"]
        assert own < 4e-6  # rounding, not the 0.05 port gap
        assert leaf.atol is not None and leaf.atol < 1e-4, (label, leaf)  # the port gap never enters the bound
