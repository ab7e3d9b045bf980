"""convert.flax_leaf: the one lookup from a torch parameter name to its Flax leaf, which the frozen, padding-row
and unused-parameter checks all read (a lookup written three times before)."""
from hypothesis import given, settings
from hypothesis import strategies as st

from comparisons.convert import Layer, flax_leaf

NAMES = st.lists(st.sampled_from(["enc", "dec", "blocks", "0", "1", "fc", "attn"]), min_size=1, max_size=3)
LEAVES = {"linear": {"weight": "kernel", "bias": "bias"}, "embedding": {"weight": "embedding"},
          "batchnorm": {"weight": "scale", "bias": "bias", "running_mean": "mean", "running_var": "var"}}


@settings(max_examples=60, deadline=None)
@given(outer=NAMES, inner=NAMES, kinds=st.tuples(*[st.sampled_from(sorted(LEAVES))] * 2), data=st.data())
def test_the_deepest_owner_names_the_leaf_with_its_flax_spelling(outer, inner, kinds, data):
    torch_outer, torch_inner = ".".join(outer), ".".join(outer + inner)
    mapping = [Layer(kinds[0], torch_outer, "/".join(["F", *outer])),
               Layer(kinds[1], torch_inner, "/".join(["F", *outer, "in", *inner]))]
    mapping = data.draw(st.permutations(mapping))
    key = data.draw(st.sampled_from(sorted(LEAVES[kinds[1]])))
    leaf = flax_leaf(mapping, f"{torch_inner}.{key}")
    prefix = ".".join(["F", *outer, "in", *inner])
    assert (leaf.prefix, leaf.path) == (prefix, f"{prefix}.{LEAVES[kinds[1]][key]}")
    key = data.draw(st.sampled_from(sorted(LEAVES[kinds[0]])))
    assert flax_leaf(mapping, f"{torch_outer}.{key}").path == ".".join(["F", *outer, LEAVES[kinds[0]][key]])


def test_a_name_no_entry_owns_or_its_rule_lacks_has_no_leaf():
    mapping = [Layer("linear", "enc", "encoder")]
    assert flax_leaf(mapping, "dec.weight") is None
    assert flax_leaf(mapping, "encoder.weight") is None  # the Flax name is not a torch name
    assert flax_leaf(mapping, "enc.running_mean") is None  # a linear has no running mean
    assert flax_leaf([Layer("linear", "", "")], "weight").path == "kernel"  # the root owns every name
