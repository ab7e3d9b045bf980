"""What a mutation round on render/ found unpinned (issue 35): a passing check's 'worst leaf' cell names the leaf
closest to its bound, in every format that shows it."""
from __future__ import annotations

import types

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from comparisons.render.layers import divergence_line
from comparisons.render.text import shown_leaves, worst_leaf
from comparisons.verdicts import Check, Leaf


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), count=st.integers(2, 7))
def test_a_passing_checks_worst_leaf_is_the_one_closest_to_its_bound(seed, count):
    rng = np.random.default_rng(seed)
    atols = 10.0 ** rng.uniform(-9, -3, count)
    shares = rng.permutation(np.linspace(0.05, 0.95, count))  # each leaf's |Δ| / atol, all different
    leaves = tuple(Leaf(f"layer{i}.kernel", float(share * atol), 1e-7, True, "rounding", atol=float(atol))
                   for i, (share, atol) in enumerate(zip(shares, atols)))
    check = Check("gradients", "torch DP vs jax:pmap DP", True, max(leaf.max_abs for leaf in leaves), 1e-7, 1e-5,
                  "", leaves, "rounding")
    closest = leaves[int(np.argmax(shares))]
    assert shown_leaves(check) == [closest]
    assert worst_leaf(check).startswith(f"{closest.path} {closest.max_abs:.1e} ≤ atol"), worst_leaf(check)


@settings(max_examples=10, deadline=None)
@given(rows=st.integers(0, 12))
def test_with_no_divergence_the_line_counts_every_layer_call(rows):
    report = types.SimpleNamespace(layer_view=[{"torch": f"fc{i}"} for i in range(rows)], first_divergence=None)
    assert divergence_line(report) == (f"first divergence: none; every one of {rows} layer calls agrees or differs "
                                       "by rounding")
