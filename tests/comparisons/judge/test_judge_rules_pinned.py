"""The small rules every verdict rests on, each pinned from both sides (a mutation round's survivors):
the larger of two frameworks' rounding, a layer found by its longest prefix, gradients walked in backward order."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from comparisons.convert import Layer
from comparisons.judge import larger, layer_of
from comparisons.layers import Row, Side, first_divergence
from comparisons.verdicts import Check, Leaf

drawn = settings(max_examples=30, deadline=None)
SEEDS = st.integers(0, 2**32 - 1)


@drawn
@given(seed=SEEDS)
def test_the_bound_takes_the_larger_rounding_of_the_two_frameworks_per_leaf(seed):
    rng = np.random.default_rng(seed)
    paths = [f"layer{i}.kernel" for i in range(int(rng.integers(1, 6)))]
    torch_rounding = {p: float(rng.uniform(1e-9, 1e-6)) for p in paths}
    jax_rounding = {p: float(rng.uniform(1e-9, 1e-6)) for p in paths + ["only.in.jax"]}
    both = larger(torch_rounding, jax_rounding)
    assert set(both) == set(paths)  # a leaf one side lacks has no measured rounding
    for path in paths:
        assert both[path] == max(torch_rounding[path], jax_rounding[path]) >= min(torch_rounding[path],
                                                                                   jax_rounding[path])
    assert larger(torch_rounding, {p: 0.0 for p in paths}) == torch_rounding


@drawn
@given(seed=SEEDS, depth=st.integers(1, 4))
def test_a_path_belongs_to_its_deepest_layer(seed, depth):
    rng = np.random.default_rng(seed)
    parts = [str(rng.choice(["encoder", "block", "attn", "mlp", "0", "1"])) + str(i) for i in range(depth)]
    prefixes = [".".join(parts[:k]) for k in range(1, depth + 1)]
    shuffled = [str(p) for p in rng.permutation(prefixes + ["other", ""])]
    leaf = ".".join(parts) + ".kernel"
    assert layer_of(leaf, shuffled) == prefixes[-1]
    assert layer_of(".".join(parts), shuffled) == prefixes[-1]  # the layer itself
    assert layer_of("elsewhere.kernel", [p for p in shuffled if p]) is None


AGREE = Side(0.0, 0.0, "agree")


@drawn
@given(seed=SEEDS, layers=st.integers(2, 6))
def test_when_the_forward_agrees_the_first_gradient_named_is_the_last_layer_in_backward_order(seed, layers):
    rng = np.random.default_rng(seed)
    names = [f"fc{i}" for i in range(layers)]
    mapping = [Layer("linear", name, name) for name in names]
    rows = [Row(name, name, "linear", 0, AGREE, AGREE) for name in names]
    failing = sorted(int(i) for i in rng.choice(layers, size=int(rng.integers(1, layers + 1)), replace=False))
    leaves = tuple(Leaf(f"{name}.kernel", 1e-3 if i in failing else 0.0, 1e-3, i not in failing,
                        "port" if i in failing else None) for i, name in enumerate(names))
    grads = Check("gradients", "torch DP vs jax:explicit DP", False, 1e-3, 1e-3, 1e-5, "", leaves, "port")
    found = first_divergence(rows, AGREE, mapping, [grads])
    # backward order: the gradient of the last layer is computed first, so it is where the two part first
    assert (found["where"], found["torch"]) == ("gradient", f"fc{failing[-1]}.weight"), found
    later = [names[i] for i in range(failing[-1] + 1, layers)]
    assert found["previous"] == (f"{later[0]}.weight" if later else None)
