"""Outputs of any registered pytree type: placed by path, the same path on both sides."""
from __future__ import annotations

import collections
import dataclasses

import flax.linen as flax_nn
import jax
import jax.numpy as jnp
import numpy as np
import torch
from torch.utils import _pytree

from comparisons import compare, placement_of
from comparisons.models import pair_from_modules
from comparisons.models.builtin import cross_entropy_jax, cross_entropy_torch


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
        ("out.logits", (3, 5)), ("out.hidden.0", (3, 2)), ("out.hidden.1", (3, 7))]


def test_keyless_node_without_key_context_is_placed_by_position():
    out = KeylessOutput(pair=Pair((torch.zeros(4), torch.zeros(6))))
    assert [r.path for r in placement_of(out, role="output", name="out")] == [
        "out.pair.0", "out.pair.1"]


def test_torch_dict_and_flax_dataclass_outputs_get_the_same_paths():
    torch_out = KeylessOutput(logits=torch.zeros(2, 3), hidden=(torch.zeros(2, 4),))
    jax_out = FlaxLikeOutput(logits=jnp.zeros((2, 3)), hidden=(jnp.zeros((2, 4)),))
    torch_paths = [(r.path, r.shape) for r in placement_of(torch_out, role="output", name="out")]
    jax_paths = [(r.path, r.shape) for r in placement_of(jax_out, role="output", name="out")]
    assert torch_paths == jax_paths == [("out.logits", (2, 3)), ("out.hidden.0", (2, 4))]


class DictNet(torch.nn.Module):
    """Returns {'logits': ..., 'cache': (hidden,)}: a torch-only cache beside the shared logits."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(6, 8), torch.nn.Linear(8, 3)

    def forward(self, x):
        hidden = torch.tanh(self.fc1(x))
        return {"logits": self.fc2(hidden), "cache": (hidden,)}


class FlaxDataclassNet(flax_nn.Module):
    @flax_nn.compact
    def __call__(self, x, train: bool = False):
        return FlaxLikeOutput(logits=flax_nn.Dense(3, name="fc2")(jnp.tanh(flax_nn.Dense(8, name="fc1")(x))),
                              hidden=())


def _features(batch_size, seed, dtype):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((batch_size, 6)).astype(dtype),), rng.integers(0, 3, batch_size).astype(np.int32)


def _pair(**kwargs):
    torch.manual_seed(0)
    return pair_from_modules("dict_vs_dataclass", DictNet(), FlaxDataclassNet(), make_inputs=_features,
                             loss_torch=lambda out, y: cross_entropy_torch(out["logits"], y),
                             loss_jax=lambda out, y: cross_entropy_jax(out.logits, y), **kwargs)


def test_dict_and_dataclass_outputs_compare_by_path_and_a_declared_cache_is_listed():
    settings = dict(batch_size=5, devices=2, strategies=["explicit"], steps=1, seed=1, torch_devices="cpu")
    undeclared = compare(_pair(), **settings)
    cross = [c for c in undeclared.checks if c.subject == "outputs" and "vs jax" in c.compared]
    assert not cross[0].passed and "cache.0" in cross[0].detail
    report = compare(_pair(torch_only=("cache*",)), **settings)
    assert report.ok, report.render("markdown")
    assert any(note.startswith("torch-only") and "cache.0" in note for note in report.notes)
    torch_outputs = {r.path for r in report.placements["torch"].filter(role="output")}
    jax_outputs = {r.path for r in report.placements["jax:explicit"].filter(role="output")}
    assert torch_outputs == {"out.logits", "out.cache.0"} and jax_outputs == {"out.logits"}
