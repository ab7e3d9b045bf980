"""A drift that blows up is a jump, and the drift line's words follow its numbers (issue: "a NaN drift reads
'grows like rounding'", "the line says grows while the gap shrank")."""
from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from comparisons.judge import classify_drift, drift_line, relative_gap

EPS32 = float(np.finfo(np.float32).eps)
drawn = settings(max_examples=30, deadline=None)


def entry(step: int, gaps: dict, float64: float | None) -> dict:
    return {"step": step, **gaps, "worst": max(gaps.values()), "strategy": "jax:pmap", "float64": float64}


def rounding_steps(rng, steps: int, with_float64: bool) -> list[dict]:
    out = []
    for step in range(1, steps + 1):
        gaps = {q: float(rng.uniform(1, 8)) * EPS32 * step for q in ("loss", "gradients", "params")}
        out.append(entry(step, gaps, 1e-16 if with_float64 else None))
    return out


@drawn
@given(seed=st.integers(0, 2**32 - 1), steps=st.integers(2, 12), bad=st.sampled_from([math.nan, math.inf]),
       quantity=st.sampled_from(["loss", "gradients", "params"]), with_float64=st.booleans())
def test_a_gap_that_is_not_finite_jumps_at_its_step_and_the_line_says_so(seed, steps, bad, quantity, with_float64):
    rng = np.random.default_rng(seed)
    entries = rounding_steps(rng, steps, with_float64)
    at = int(rng.integers(1, steps + 1))
    for later in entries[at - 1:]:  # a run that blew up stays blown up
        later[quantity] = bad
        later["worst"] = bad
    assert classify_drift(entries, 1e-5) == ("jumps", at)
    line = drift_line(entries, 1e-5)
    assert line.startswith(f"drift: jumps at step {at}"), line
    assert f"the {quantity} gap is {bad:.1e}" in line and "grows like rounding" not in line and "xnan" not in line, line


@drawn
@given(seed=st.integers(0, 2**32 - 1))
def test_the_worst_gap_of_a_tree_with_a_nan_leaf_is_nan(seed):
    rng = np.random.default_rng(seed)
    torch_tree = {f"layer{i}": rng.normal(size=(3, 2)) for i in range(int(rng.integers(2, 5)))}
    jax_tree = {path: leaf + 1e-7 for path, leaf in torch_tree.items()}
    broken = str(rng.choice(sorted(jax_tree)))
    jax_tree[broken] = np.where(rng.random((3, 2)) < 0.5, np.nan, jax_tree[broken])
    jax_tree[broken].flat[0] = np.nan
    assert math.isnan(relative_gap(jax_tree, torch_tree))


@drawn
@given(seed=st.integers(0, 2**32 - 1), steps=st.integers(2, 12), factor=st.floats(0.3, 0.95))
def test_a_gap_that_shrinks_is_said_to_shrink(seed, steps, factor):
    rng = np.random.default_rng(seed)
    entries = [entry(k, {q: 5e-6 * factor ** k * float(rng.uniform(0.9, 1.0)) for q in ("loss", "gradients", "params")},
                     None) for k in range(1, steps + 1)]
    line = drift_line(entries, 1e-5)
    assert line.startswith("drift: shrinks like rounding") and "grows" not in line, line
    grown = [dict(e, step=k) for k, e in enumerate(reversed(entries), start=1)]
    assert drift_line(grown, 1e-5).startswith("drift: grows like rounding"), drift_line(grown, 1e-5)
