"""What a mutation round on layers/ found unpinned (issue 35): a divergence between two layers carries the cause of
the input that differs, not of that layer's output."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from comparisons.convert import Layer
from comparisons.layers import Row, Side, first_divergence

AGREE = Side(0.0, 0.0, "agree")


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), layers=st.integers(2, 6), cause=st.sampled_from(["port", None]))
def test_a_divergence_between_layers_carries_the_cause_and_figure_of_the_input_that_differs(seed, layers, cause):
    rng = np.random.default_rng(seed)
    names = [f"fc{i}" for i in range(layers)]
    at = int(rng.integers(1, layers))
    size = float(10.0 ** rng.uniform(-4, -1))
    differs = Side(size, size, "differs", cause, "input differs")
    later = Side(2 * size, 2 * size, "differs", "rounding" if cause else "port", "output differs")
    rows = [Row(name, name, "linear", 0, differs if i == at else AGREE, later if i >= at else AGREE)
            for i, name in enumerate(names)]
    found = first_divergence(rows, later, [Layer("linear", name, name) for name in names], [])
    assert (found["where"], found["torch"], found["previous"]) == ("between", names[at], names[at - 1]), found
    assert found["cause"] == cause and f"differs by {size:.1e}" in found["message"], found


@settings(max_examples=20, deadline=None)
@given(depth=st.integers(2, 4), seed=st.integers(0, 2**32 - 1))
def test_a_failing_gradient_is_named_in_its_deepest_layer(depth, seed):
    from comparisons.verdicts import Check, Leaf

    rng = np.random.default_rng(seed)
    parts = [f"m{i}" for i in range(depth)]
    mapping = [Layer("linear", ".".join(parts[:k]), "/".join(parts[:k])) for k in rng.permutation(range(1, depth + 1))]
    rows = [Row(layer.torch, layer.flax, "linear", 0, AGREE, AGREE) for layer in mapping]
    leaf = Leaf(".".join(parts) + ".kernel", 1e-3, 1e-3, False, "port", message="differs")
    grads = Check("gradients", "torch DP vs jax:pmap DP", False, 1e-3, 1e-3, 1e-5, "", (leaf,), "port")
    found = first_divergence(rows, AGREE, mapping, [grads])
    assert (found["where"], found["torch"]) == ("gradient", ".".join(parts) + ".weight"), found
