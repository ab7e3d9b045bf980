"""A leaf with nothing finite on either side is named and fails: an all-NaN run never passes with |Δ| 0."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from comparisons.judge import Bounds, compare_trees

drawn = settings(max_examples=25, deadline=None)


def tree(rng) -> dict:
    return {f"layer{i}": rng.standard_normal((int(rng.integers(1, 5)), 3)) for i in range(int(rng.integers(2, 5)))}


@drawn
@given(seed=st.integers(0, 2**32 - 1), bad=st.sampled_from([np.nan, np.inf]))
def test_a_leaf_that_is_not_finite_anywhere_fails_by_name(seed, bad):
    rng = np.random.default_rng(seed)
    torch_tree = tree(rng)
    jax_tree = {path: leaf.copy() for path, leaf in torch_tree.items()}
    blown = str(rng.choice(sorted(torch_tree)))
    jax_tree[blown] = (jax_tree[blown] + 5) * bad  # (h + 5) * nan against h * nan: no finite entry to compare
    torch_tree[blown] = torch_tree[blown] * 0 + bad
    check = compare_trees("outputs", "torch vs jax:pmap", jax_tree, torch_tree, Bounds(1e-5))
    assert not check.passed
    (leaf,) = [leaf for leaf in check.leaves if not leaf.passed]
    assert leaf.path == blown and leaf.kind == "non_finite" and "nothing finite to compare" in leaf.message
    assert blown in check.detail


@drawn
@given(seed=st.integers(0, 2**32 - 1))
def test_nan_at_the_same_positions_beside_finite_entries_still_passes(seed):
    rng = np.random.default_rng(seed)
    torch_tree = tree(rng)
    path = sorted(torch_tree)[0]
    torch_tree[path][0, 0] = np.nan  # a masked entry both sides share
    jax_tree = {p: leaf.copy() for p, leaf in torch_tree.items()}
    assert compare_trees("outputs", "torch vs jax:pmap", jax_tree, torch_tree, Bounds(1e-5)).passed
