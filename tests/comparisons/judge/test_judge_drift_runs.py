"""The drift per step over several JAX strategies: each step names the strategy with the largest gap and every
figure of the entry is that strategy's (docs/report_schema.md#drift), drawn runs built by hand."""
from __future__ import annotations

import numpy as np
from _twins import make
from hypothesis import given, settings
from hypothesis import strategies as st

from comparisons.judge import Bounds, drift, relative_gap
from comparisons.placement import PlacementMap
from comparisons.runs import BackendRun, Float64Reference, Snapshot, Trajectory

PAIR = make("gelu_by_hand")


def trained(label: str, losses, grads, params) -> BackendRun:
    steps = Trajectory()
    for loss, g, p in zip(losses, grads, params):
        steps.add(loss, g, p)
    dp = Snapshot(None, grads[0], {}, params[-1], trajectory=steps)
    return BackendRun(label, dp, dp, PlacementMap(()), [4, 4], 1)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), steps=st.integers(1, 6), strategies=st.integers(2, 4))
def test_each_step_names_the_strategy_with_the_largest_gap_and_reports_its_figures(seed, steps, strategies):
    rng = np.random.default_rng(seed)
    grads = [{"fc1": {"kernel": rng.standard_normal((3, 2))}} for _ in range(steps)]
    params = [{"fc1": {"kernel": rng.standard_normal((3, 2))}} for _ in range(steps)]
    losses = list(rng.uniform(1, 2, steps))
    runs = [trained("torch", losses, grads, params)]
    sizes = 10.0 ** rng.uniform(-7, -3, (strategies, steps))
    for s in range(strategies):
        def moved(trees, s=s):
            return [{"fc1": {"kernel": tree["fc1"]["kernel"] * (1 + sizes[s, k])}} for k, tree in enumerate(trees)]
        runs.append(trained(f"jax:s{s}", [x * (1 + sizes[s, k]) for k, x in enumerate(losses)], moved(grads),
                            moved(params)))
    entries = drift(PAIR, runs, None, Bounds(1e-5))
    assert [e["step"] for e in entries] == list(range(1, steps + 1))
    for k, entry in enumerate(entries):
        worst = int(np.argmax(sizes[:, k]))  # each of its three gaps is sizes[s, k]
        assert entry["strategy"] == f"jax:s{worst}", (entry, sizes[:, k])
        for quantity in ("loss", "gradients", "params", "worst"):
            assert np.isclose(entry[quantity], sizes[worst, k], rtol=1e-6), (quantity, entry)
        assert np.isclose(entry["params"], relative_gap(runs[worst + 1].dp.trajectory.params[k], params[k]))
        # over the checks' derived bound (rtol 1e-5 at each entry's |b| and at the leaf's scale): about size / 2e-5
        assert 0.2 * sizes[worst, k] / 1e-5 < entry["of_bound"]["params"] <= sizes[worst, k] / 1e-5 * 1.0001


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), noise=st.booleans())
def test_the_float64_line_leaves_out_a_leaf_whose_gradient_is_rounding_noise_as_the_checks_do(seed, noise):
    rng = np.random.default_rng(seed)
    kernel = rng.standard_normal((3, 2))
    bias_grad = (1e-14 if noise else 1e-2) * rng.uniform(0.5, 1.0, 2)  # noise: zero in exact arithmetic
    grads = {"fc1": {"kernel": kernel, "bias": bias_grad}}
    params = {"fc1": {"kernel": kernel, "bias": rng.standard_normal(2)}}
    moved = {"fc1": {"kernel": kernel, "bias": params["fc1"]["bias"] + 1e-6}}  # Adam scales the noise up
    float32 = [trained(label, [1.0], [grads], [params]) for label in ("torch", "jax:pmap")]
    torch64, jax64 = (trained(label, [1.0], [grads], [tree]).dp for label, tree in (("t", params), ("j", moved)))
    (entry,) = drift(PAIR, float32, Float64Reference(torch64, jax64), Bounds(1e-5))
    assert (entry["of_bound"]["float64"] <= 1.0) == noise, entry["of_bound"]


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_each_frameworks_rounding_is_measured_against_its_own_float64_run_so_a_port_gap_stays_a_gap(seed):
    rng = np.random.default_rng(seed)
    torch_tree = {"fc1": {"kernel": rng.standard_normal((3, 2))}}
    jax_tree = {"fc1": {"kernel": torch_tree["fc1"]["kernel"] + 1e-3}}  # a port gap, in float32 and float64 alike
    float32 = [trained(label, [1.0], [tree], [tree]) for label, tree in (("torch", torch_tree), ("jax:pmap", jax_tree))]
    torch64, jax64 = (trained(label, [1.0], [tree], [tree]).dp for label, tree in (("t", torch_tree), ("j", jax_tree)))
    (entry,) = drift(PAIR, float32, Float64Reference(torch64, jax64), Bounds(1e-5))
    assert entry["of_bound"]["params"] > 1 and entry["of_bound"]["gradients"] > 1, entry["of_bound"]
