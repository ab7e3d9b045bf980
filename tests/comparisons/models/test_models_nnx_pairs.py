"""Flax NNX twins compared as a user compares them: an honest twin passes every strategy under compare()'s
defaults (batch 7 on 4 devices, 2 steps), a planted NNX trap fails naming its leaf."""
from __future__ import annotations

import html
import json

import numpy as np
import pytest
import torch
from _nnx_twins import lm_pair, mlp_pair
from flax import nnx

from comparisons import compare
from comparisons.models import builtin, nnx_nets, pair_from_modules, torch_nets

SEED = int(np.random.default_rng().integers(0, 1000))


def _failed_leaves(report) -> dict[str, set[str]]:
    """subject -> paths of the torch-vs-JAX leaves that failed."""
    return {c.subject: {leaf.path for leaf in c.leaves if not leaf.passed}
            for c in report.checks if not c.passed and c.compared.startswith("torch DP vs jax")}


@pytest.mark.parametrize("make", [mlp_pair, lm_pair], ids=["mlp_batchnorm", "tied_rmsnorm_lm"])
def test_an_honest_nnx_twin_passes_every_strategy(make):
    pair = make(seed=SEED)
    assert repr(pair.jax_side) == "NNX"
    report = compare(pair, batch_size=7, devices=4, seed=SEED, torch_devices="cpu")
    assert report.ok, report.render("markdown")
    assert len(report.strategies) >= 3


def test_nnx_batchnorm_momentum_099_fails_naming_the_running_mean():
    """nnx.BatchNorm's default momentum 0.99 is torch's 0.01, not torch's 0.1."""
    report = compare(mlp_pair(momentum=0.99, seed=SEED), batch_size=7, devices=4, seed=SEED,
                     strategies=["explicit"], torch_devices="cpu")
    failed = _failed_leaves(report)
    assert not report.ok
    assert failed == {"batch_stats": {"bn.mean", "bn.var"}} or failed.get("batch_stats", set()) >= {"bn.mean"}, failed
    assert "outputs" not in failed and "gradients" not in failed  # momentum moves the running averages alone
    _names_the_trap(report, "batch_stats", "bn.mean", "nnx.BatchNorm momentum=0.99", "nnx.BatchNorm(..., momentum=0.9)")
    assert "biased" not in _leaf(report, "batch_stats", "bn.mean").message  # the variance trap moves `var` alone


def test_nnx_batchnorms_biased_running_variance_undeclared_fails_naming_the_trap():
    report = compare(mlp_pair(seed=SEED, known_differences=()), batch_size=7, devices=4, seed=SEED,
                     strategies=["explicit"], torch_devices="cpu")
    assert _failed_leaves(report) == {"batch_stats": {"bn.var"}}, _failed_leaves(report)
    _names_the_trap(report, "batch_stats", "bn.var", "nnx.BatchNorm keeps the biased batch variance",
                    "a BatchNorm that tracks n / (n - 1) x the variance")


def test_rmsnorm_epsilon_differing_from_torch_fails_naming_the_norm():
    """nnx.RMSNorm's epsilon 1e-6 against torch eps=1e-5: every gradient after the norms moves."""
    report = compare(lm_pair(torch_eps=1e-5, seed=SEED), batch_size=7, devices=4, seed=SEED, strategies=["explicit"],
                     torch_devices="cpu")
    failed = _failed_leaves(report)
    assert not report.ok and "outputs" in failed
    assert {"blocks.0.norm1.scale", "norm.scale"} <= failed["gradients"], failed
    _names_the_trap(report, "gradients", "norm.scale", "nnx.RMSNorm epsilon=1e-06, torch's eps=1e-05",
                    "nnx.RMSNorm(..., epsilon=1e-05)")
    output = _leaf(report, "outputs", None)  # no layer owns the output: the trapped layers are named by path
    assert "NNX settings unlike torch's in the twin: " in output.message and "`norm` rmsnorm-epsilon" in output.message


def test_layernorm_epsilon_1e6_in_an_nnx_transformer_block_fails_naming_the_norm():
    torch.manual_seed(SEED)
    twin = nnx_nets.TransformerBlock(rngs=nnx.Rngs(SEED))
    twin.ln2.epsilon = 1e-6  # nnx.LayerNorm's default, where torch's is 1e-5
    block = builtin.TRANSFORMER_BLOCK
    pair = pair_from_modules("block_nnx", torch_nets.TransformerBlock(), twin, make_inputs=block.make_inputs,
                             loss_torch=block.loss_torch, loss_jax=block.loss_jax)
    report = compare(pair, batch_size=7, devices=4, seed=SEED, strategies=["explicit"], torch_devices="cpu")
    assert "ln2.scale" in _failed_leaves(report)["gradients"], _failed_leaves(report)
    _names_the_trap(report, "gradients", "ln2.scale", "nnx.LayerNorm epsilon=1e-06, torch's eps=1e-05",
                    "nnx.LayerNorm(..., epsilon=1e-05)")


def _leaf(report, subject: str, path: str | None):
    """The failing torch-vs-JAX leaf at `path` (None: the first failing one) of `subject`."""
    check = next(c for c in report.checks if c.subject == subject and c.compared.startswith("torch DP vs jax")
                 and not c.passed)
    return next(leaf for leaf in check.leaves if not leaf.passed and path in (None, leaf.path))


def _names_the_trap(report, subject: str, path: str, cause: str, fix: str) -> None:
    """The failing leaf's message names the NNX trap of its layer, in one line, and every format shows it."""
    message = _leaf(report, subject, path).message
    layer = path.rpartition(".")[0]
    assert f"NNX trap at `{layer}`: {cause}" in message and f"fix: {fix}" in message and "\n" not in message, message
    shown_as = (report.render("table"), html.unescape(report.render("html")), json.dumps(json.loads(report.to_json())))
    for shown in shown_as:
        assert cause in shown and fix in shown
