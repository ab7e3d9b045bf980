"""Derived mappings for module lists spelled the Flax way, and for a tensor tied under two torch names."""
from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from comparisons import ComparisonError, compare
from comparisons.models import pair_from_modules, tied_parameters
from comparisons.models.builtin import cross_entropy_jax, cross_entropy_torch

SMALL = dict(batch_size=5, devices=2, strategies=["explicit"], steps=1, torch_devices="cpu")


def features(batch_size, seed, dtype):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((batch_size, 6)).astype(dtype),), rng.integers(0, 3, batch_size).astype(np.int32)


class TorchStack(torch.nn.Module):
    def __init__(self, depth: int):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(6, 6) for _ in range(depth))
        self.head = torch.nn.Linear(6, 3)

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return self.head(x)


class _Layers(nn.Module):
    """`self.layers = [...]` in setup: linen names the entries layers_0, layers_1, ..."""
    depth: int

    def setup(self):
        self.layers = [nn.Dense(6) for _ in range(self.depth)]

    def __call__(self, x):
        for layer in self.layers:
            x = jnp.tanh(layer(x))
        return x


class FlaxList(_Layers):
    """The list at the top: layers_0, layers_1, ..., beside head."""

    def setup(self):
        super().setup()
        self.head = nn.Dense(3)

    def __call__(self, x, train: bool = False):
        return self.head(super().__call__(x))


class FlaxNested(nn.Module):
    """A submodule named 'layers' holding the list: layers/layers_0, layers/layers_1, ..."""
    depth: int

    @nn.compact
    def __call__(self, x, train: bool = False):
        return nn.Dense(3, name="head")(_Layers(self.depth, name="layers")(x))


@pytest.mark.parametrize("flax_class, spelled", [(FlaxList, "layers_{}"), (FlaxNested, "layers/layers_{}")])
def test_module_list_entries_find_their_flax_spelling_without_a_hook(flax_class, spelled):
    depth = int(np.random.default_rng().integers(2, 5))
    torch.manual_seed(depth)
    pair = pair_from_modules("stack", TorchStack(depth), flax_class(depth), make_inputs=features,
                             loss_torch=cross_entropy_torch, loss_jax=cross_entropy_jax)
    paths = {layer.torch: layer.flax for layer in pair.mapping}
    assert paths == {**{f"layers.{i}": spelled.format(i) for i in range(depth)}, "head": "head"}
    report = compare(pair, seed=depth, **SMALL)
    assert report.ok, report.render("markdown")


class TorchTied(torch.nn.Module):
    """An embedding whose table is also the output layer's weight; the output layer keeps its own bias."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(11, 6)
        self.norm = torch.nn.LayerNorm(6)
        self.head = torch.nn.Linear(6, 11)
        self.head.weight = self.embed.weight

    def forward(self, ids):
        return self.head(self.norm(self.embed(ids)).mean(dim=1))


class FlaxTied(nn.Module):
    @nn.compact
    def __call__(self, ids, train: bool = False):
        embed = nn.Embed(11, 6, name="embed")
        h = nn.LayerNorm(epsilon=1e-5, name="norm")(embed(ids)).mean(axis=1)
        bias = _Bias(11, name="head")
        return bias(embed.attend(h))


class _Bias(nn.Module):
    features: int

    @nn.compact
    def __call__(self, x):
        return x + self.param("bias", nn.initializers.zeros, (self.features,))


def tokens(batch_size, seed, dtype):
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 11, (batch_size, 4)).astype(np.int32),), rng.integers(0, 11, batch_size).astype(np.int32)


def test_a_tied_weight_converts_once_is_listed_under_both_names_and_its_summed_gradient_matches():
    torch.manual_seed(3)
    torch_model = TorchTied()
    assert tied_parameters(torch_model) == (("head.weight", "embed.weight"),)
    pair = pair_from_modules("tied", torch_model, FlaxTied(), make_inputs=tokens,
                             loss_torch=cross_entropy_torch, loss_jax=cross_entropy_jax)
    assert {layer.torch: layer.kind for layer in pair.mapping}["head"] == "tied_bias"
    report = compare(pair, seed=int(np.random.default_rng().integers(100)), **SMALL)
    assert report.ok, report.render("markdown")
    tied = [note for note in report.notes if note.startswith("tied")]
    assert tied and "head.weight = embed.weight" in tied[0]
    assert not any("head.weight" in note for note in report.notes if note.startswith("torch-only"))


def test_a_flax_twin_that_unties_the_weight_is_refused_naming_its_extra_kernel():
    """torch's head has no weight of its own (it is the embedding's), so a twin with its own output kernel
    holds a leaf the mapping cannot fill: refused before any run, naming the leaf."""
    torch.manual_seed(4)

    class Untied(nn.Module):
        @nn.compact
        def __call__(self, ids, train: bool = False):
            h = nn.LayerNorm(epsilon=1e-5, name="norm")(nn.Embed(11, 6, name="embed")(ids)).mean(axis=1)
            return nn.Dense(11, name="head")(h)

    pair = pair_from_modules("untied", TorchTied(), Untied(), make_inputs=tokens,
                             loss_torch=cross_entropy_torch, loss_jax=cross_entropy_jax)
    with pytest.raises(ComparisonError, match=r"params\.head\.kernel.*mapping does not produce"):
        compare(pair, seed=1, **SMALL)
