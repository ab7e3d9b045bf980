"""JaxSide: what a pair's JAX side provides, one declared protocol; each kind implements it in one file, and the
harness asks it (never the pair's attributes by name)."""
from __future__ import annotations

import dataclasses

import flax.linen as nn
import numpy as np
import pytest

from comparisons import ComparisonError, compare, models
from comparisons.models import Built, FlaxApply, JaxSide
from comparisons.models.jax_flax_apply import FLAX_APPLY
from comparisons.models.jax_linen import LINEN
from comparisons.traced.jax_side import TRACED

MEMBERS = ("in_worker", "captures_layers", "make", "convert", "computing_in", "run_in_worker")


@pytest.mark.parametrize("side", [LINEN, FLAX_APPLY, TRACED])
def test_every_kind_provides_every_member_of_the_protocol(side):
    declared = set(JaxSide.__annotations__) | {n for n in vars(JaxSide) if not n.startswith("_")}
    assert set(MEMBERS) <= declared
    for member in MEMBERS:
        assert hasattr(side, member), member
    assert isinstance(side.in_worker, bool) and isinstance(side.captures_layers, bool)
    assert side.in_worker == (side is TRACED) and side.captures_layers == (side is not TRACED)


class Recording:
    """A kind of JAX side of its own: the linen one, with every call the pair makes written down."""

    in_worker, captures_layers, computes_in_run_dtype = False, True, False

    def __init__(self):
        self.calls = []

    def make(self, pair):
        self.calls.append("make")
        return LINEN.make(pair)

    def convert(self, pair, torch_module, model, dtype):
        self.calls.append(("convert", np.dtype(dtype).name))
        return LINEN.convert(pair, torch_module, model, dtype)

    def computing_in(self, model, dtype):
        return LINEN.computing_in(model, dtype)

    def run_in_worker(self, pair, run, strategies, devices, float64):
        raise AssertionError("an in-process side is never asked to run in a worker")


@pytest.mark.parametrize("name, dtype", [("mlp", np.float32), ("cnn_bn", np.float64)])
def test_a_pair_is_built_through_its_jax_side(name, dtype):
    recording = Recording()
    pair = dataclasses.replace(models.get(name), jax_side=recording)
    built = pair.build(seed=3, dtype=dtype)
    assert isinstance(built, Built) and recording.calls == ["make", ("convert", np.dtype(dtype).name)]
    assert {np.asarray(leaf).dtype for leaf in _leaves(built.variables["params"])} == {np.dtype(dtype)}
    plain = models.get(name).build(seed=3, dtype=dtype)  # the same weights as the default linen side
    for ours, theirs in zip(_leaves(built.variables), _leaves(plain.variables), strict=True):
        np.testing.assert_array_equal(ours, theirs)


def _leaves(tree):
    import jax

    return jax.tree.leaves(tree)


def test_the_built_in_pairs_are_linen_and_a_traced_pair_is_traced():
    assert {models.get(name).jax_side for name in models.names()} >= {LINEN}
    from comparisons.traced import TracedPair

    assert TracedPair.__dataclass_fields__["jax_side"].default is TRACED


class Dense(nn.Module):
    features: int = 3
    dtype: str = "float32"

    @nn.compact
    def __call__(self, x, train=False):
        return nn.Dense(self.features, dtype=self.dtype)(x)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_model_with_its_own_compute_dtype_is_cloned_to_the_run_s_whichever_kind_holds_it(dtype):
    assert LINEN.computing_in(Dense(dtype="bfloat16"), dtype).dtype == dtype
    wrapped = FlaxApply(Dense(dtype="bfloat16"))
    for side in (FLAX_APPLY, LINEN):  # LINEN: a ModelPair made by hand around a FlaxApply
        moved = side.computing_in(wrapped, dtype)
        assert moved.module.dtype == dtype and wrapped.module.dtype == "bfloat16" and moved is not wrapped


class Elsewhere(Recording):
    in_worker, captures_layers = True, False


def test_the_harness_asks_the_protocol_whether_the_side_runs_elsewhere():
    pair = dataclasses.replace(models.get("mlp"), name="mlp_elsewhere", jax_side=Elsewhere())
    with pytest.raises(ComparisonError, match="padding=True is not available for pair 'mlp_elsewhere'"):
        compare(pair, batch_size=4, devices=2, steps=1, padding=True, torch_devices="cpu")
    compare_linen = dataclasses.replace(models.get("mlp"), name="mlp_here", jax_side=Recording())
    with pytest.raises(AssertionError, match="stop"):
        _stop_at_build(compare_linen)


def _stop_at_build(pair):
    """compare() on `pair` up to its build, which the side's make ends: the in-process side passed the check."""
    side = pair.jax_side

    def make(the_pair):
        raise AssertionError("stop")
    side.make = make
    compare(pair, batch_size=4, devices=2, steps=1, padding=True, torch_devices="cpu")
