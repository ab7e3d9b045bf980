"""Outputs of any registered pytree type: placed by path, the same path on both sides."""
from __future__ import annotations

import collections
import dataclasses

import jax
import jax.numpy as jnp
import torch
from torch.utils import _pytree

from comparisons import placement_of


class KeylessOutput(collections.OrderedDict):
    """Like transformers' torch ModelOutput: a dict registered with torch's pytree without key functions."""


_pytree.register_pytree_node(
    KeylessOutput,
    lambda out: (list(out.values()), list(out.keys())),
    lambda values, keys: KeylessOutput(zip(keys, values)),
)


class Pair(tuple):
    """A tuple-like node registered without keys whose context is not a key list."""


_pytree.register_pytree_node(Pair, lambda p: (list(p), None), lambda values, _: Pair(values))


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class FlaxLikeOutput:
    logits: jax.Array
    hidden: tuple


def test_torch_type_registered_without_key_functions_is_placed_by_key():
    out = KeylessOutput(logits=torch.zeros(3, 5), hidden=(torch.ones(3, 2), torch.ones(3, 7)))
    placement = placement_of(out, role="output", name="out")
    assert [(r.path, r.shape) for r in placement] == [
        ("out['logits']", (3, 5)), ("out['hidden'][0]", (3, 2)), ("out['hidden'][1]", (3, 7))]


def test_keyless_node_without_key_context_is_placed_by_position():
    out = KeylessOutput(pair=Pair((torch.zeros(4), torch.zeros(6))))
    assert [r.path for r in placement_of(out, role="output", name="out")] == [
        "out['pair'][0]", "out['pair'][1]"]


def test_torch_dict_and_flax_dataclass_outputs_get_the_same_paths():
    torch_out = KeylessOutput(logits=torch.zeros(2, 3), hidden=(torch.zeros(2, 4),))
    jax_out = FlaxLikeOutput(logits=jnp.zeros((2, 3)), hidden=(jnp.zeros((2, 4)),))
    torch_paths = [(r.path, r.shape) for r in placement_of(torch_out, role="output", name="out")]
    jax_paths = [(r.path, r.shape) for r in placement_of(jax_out, role="output", name="out")]
    assert torch_paths == jax_paths == [("out['logits']", (2, 3)), ("out['hidden'][0]", (2, 4))]
