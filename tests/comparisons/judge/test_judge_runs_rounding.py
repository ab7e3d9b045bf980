"""Each framework's float32 rounding is measured against its OWN float64 run (judge/_runs.py), never the other
framework's: against the other's, a port gap between the two float64 runs reads as rounding, so the bound of
every check that leaf feeds grows by the port gap and a data-parallel bug smaller than it passes unseen
(a mutation round's survivor, issue 35). Also pinned on runs built by hand: the cross bound takes the larger
of the two frameworks' rounding, where-to-look-next words, the float32 islands check."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
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


def cross_check(checks, subject: str):
    return next(c for c in checks if c.subject == subject and c.compared == "torch DP vs jax:explicit DP")


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), rounding=st.sampled_from([3e-5, 1e-4]))
def test_the_cross_bound_takes_the_larger_rounding_so_torchs_own_rounding_is_never_a_port_bug(seed, rounding):
    rng = np.random.default_rng(seed)
    exact = {"w": rng.uniform(0.5, 1.0, 16)}
    torch32 = {"w": exact["w"] + rounding * rng.choice([-1.0, 1.0], 16)}  # torch's float32 run rounds this much
    runs = [run("torch", torch32, torch32), run("jax:explicit", exact, exact)]  # JAX's not at all
    checks = judge_runs(PAIR, runs, Bounds(1e-5), Float64Reference(snapshot(exact), snapshot(exact)))
    # a gap of torch's own measured rounding, far beyond the rtol and JAX's rounding: rounding, and it passes
    gradients = cross_check(checks, "gradients")
    assert (gradients.passed, gradients.cause) == (True, "rounding"), gradients.detail


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), outputs_differ=st.booleans(), gradients_differ=st.booleans())
def test_where_to_look_next_is_said_only_on_failing_outputs_whose_gradients_all_agree(seed, outputs_differ,
                                                                                      gradients_differ):
    rng = np.random.default_rng(seed)
    tree = {"w": rng.standard_normal(8)}
    jax = snapshot(tree)
    if outputs_differ:
        jax.outputs = {"out": tree["w"] + 1.0}
    if gradients_differ:
        jax.gradients = {"w": tree["w"] + 1.0}
    runs = [run("torch", tree, tree), BackendRun("jax:explicit", jax, jax, PlacementMap(()), [4, 4], 1)]
    outputs = cross_check(judge_runs(PAIR, runs, Bounds(1e-5)), "outputs")
    assert outputs.passed != outputs_differ
    assert ("so the forward differs where no parameter is" in outputs.detail) == (outputs_differ and
                                                                                 not gradients_differ)


@pytest.mark.parametrize("outputs_pass", [True, False])
def test_the_float32_islands_check_passes_exactly_when_the_outputs_check_does(outputs_pass):
    from comparisons.judge import island_checks
    from comparisons.verdicts import Check

    pair = dataclasses.replace(PAIR, known_differences=("float32_islands",))
    tree = {"w": np.ones(3)}
    runs = [run("torch", tree, tree), run("jax:explicit", tree, tree)]
    outputs = Check("outputs", "torch DP vs jax:explicit DP", outputs_pass)
    (island,) = island_checks(pair, runs, Float64Reference(snapshot(tree), snapshot(tree)), [outputs])
    assert island.passed == outputs_pass and ("beyond it" in island.detail) != outputs_pass
