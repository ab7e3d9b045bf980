"""The `flax` setting: a built-in pair runs in the Flax API asked (NNX by default), a pair of the user's own in its
own API (the other one refused by name), and the report says which API ran, in every format."""
from __future__ import annotations

import dataclasses
import json
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from comparisons import ComparisonError, compare, models
from comparisons.models import builtin
from comparisons.models.jax_linen import LINEN
from comparisons.models.jax_nnx import NNX, NNXSide, is_nnx_module
from comparisons.models.pair import _REGISTRY

WORDS = {"nnx": "JAX in Flax NNX", "linen": "JAX in Flax linen"}


@pytest.mark.parametrize("index", range(len(builtin.BUILTIN)))
def test_each_builtin_pair_gives_its_twin_in_the_api_asked_nnx_by_default(index):
    linen, nnx = builtin.BUILTIN[index], builtin.BUILTIN_NNX[index]
    for given_pair in (linen, nnx, linen.name):
        pair = builtin.in_flax_api(models.get(given_pair) if isinstance(given_pair, str) else given_pair, None)
        assert pair is nnx and pair.jax_side is NNX
        assert builtin.in_flax_api(pair, "linen") is linen and linen.jax_side is LINEN
    made = nnx.make_flax()
    assert is_nnx_module(made) and made is nnx.make_flax()  # one module: its compiled programs are reused
    assert builtin.flax_apis(linen) == builtin.flax_apis(nnx) == ("nnx", "linen")


@pytest.mark.parametrize("own, other", [(0, "nnx"), (1, "linen")])
def test_a_pair_of_ones_own_runs_in_its_api_and_the_other_is_refused_by_name(own, other):
    twin = (builtin.BUILTIN, builtin.BUILTIN_NNX)[own][0]
    api = ("linen", "nnx")[own]
    mine = dataclasses.replace(twin, name="my_net")  # the same twin, but not the built-in object: the user's own
    assert builtin.flax_apis(mine) == (api,)
    assert builtin.in_flax_api(mine, None) is mine and builtin.in_flax_api(mine, api) is mine
    kind = {"nnx": "a Flax NNX module", "linen": "a Flax linen model"}[api]
    with pytest.raises(ComparisonError) as refused:
        compare(mine, flax=other, torch_devices="cpu")
    assert str(refused.value) == (f"compare: flax={other!r} does not apply to pair 'my_net': its JAX side is {kind}, "
                                  f"and only the built-in pairs come in both Flax APIs; pass flax={api!r} or drop flax")
    refusal = f"run: --flax {other} does not apply .* pass --flax {api} or drop --flax"
    with pytest.raises(ComparisonError, match=refusal):
        builtin.in_flax_api(mine, other, flag="--flax", caller="run")


def test_a_pair_registered_over_a_builtin_name_is_the_users_and_keeps_its_api(monkeypatch):
    mine = dataclasses.replace(builtin.MLP, description="my own mlp")
    monkeypatch.setitem(_REGISTRY, "mlp", mine)
    assert builtin.in_flax_api(models.get("mlp"), None) is mine
    with pytest.raises(ComparisonError, match="flax='nnx' does not apply to pair 'mlp'"):
        builtin.in_flax_api(models.get("mlp"), "nnx")


@pytest.mark.parametrize("flax", [None, "linen"])
@given(batch_size=st.integers(2, 5), seed=st.integers(0, 2**16))
@settings(max_examples=1, deadline=None)
def test_the_report_says_which_flax_api_ran_and_it_is_the_one_that_ran(flax, batch_size, seed):
    made = []
    original = NNXSide.make
    with mock.patch.object(NNXSide, "make", lambda self, pair: made.append(pair.name) or original(self, pair)):
        report = compare("mlp", flax=flax, batch_size=batch_size, seed=seed, devices=2, strategies=["explicit"],
                         steps=1, precision="off", torch_devices="cpu")
    ran = flax or "nnx"
    assert report.ok, report.failures
    assert bool(made) == (ran == "nnx")
    assert report.flax == ran and json.loads(report.to_json())["flax"] == ran
    for fmt in ("table", "markdown", "html"):
        assert WORDS[ran] in report.render(fmt) and WORDS[{"nnx": "linen", "linen": "nnx"}[ran]] not in \
            report.render(fmt)
