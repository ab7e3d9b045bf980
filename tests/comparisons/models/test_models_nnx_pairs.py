"""Flax NNX twins compared as a user compares them: an honest twin passes every strategy under compare()'s
defaults (batch 7 on 4 devices, 2 steps), a planted NNX trap fails naming its leaf."""
from __future__ import annotations

import numpy as np
import pytest
from _nnx_twins import lm_pair, mlp_pair

from comparisons import compare

SEED = int(np.random.default_rng().integers(0, 1000))


def _failed_leaves(report) -> dict[str, set[str]]:
    """subject -> paths of the torch-vs-JAX leaves that failed."""
    return {c.subject: {leaf.path for leaf in c.leaves if not leaf.passed}
            for c in report.checks if not c.passed and c.compared.startswith("torch DP vs jax")}


@pytest.mark.parametrize("make", [mlp_pair, lm_pair], ids=["mlp_batchnorm", "tied_rmsnorm_lm"])
def test_an_honest_nnx_twin_passes_every_strategy(make):
    pair = make(seed=SEED)
    assert repr(pair.jax_side) == "NNX"
    report = compare(pair, batch_size=7, devices=4, seed=SEED)
    assert report.ok, report.render("markdown")
    assert len(report.strategies) >= 3


def test_nnx_batchnorm_momentum_099_fails_naming_the_running_mean():
    """nnx.BatchNorm's default momentum 0.99 is torch's 0.01, not torch's 0.1."""
    report = compare(mlp_pair(momentum=0.99, seed=SEED), batch_size=7, devices=4, seed=SEED,
                     strategies=["explicit"])
    failed = _failed_leaves(report)
    assert not report.ok
    assert failed == {"batch_stats": {"bn.mean", "bn.var"}} or failed.get("batch_stats", set()) >= {"bn.mean"}, failed
    assert "outputs" not in failed and "gradients" not in failed  # momentum moves the running averages alone


def test_rmsnorm_epsilon_differing_from_torch_fails_naming_the_norm():
    """nnx.RMSNorm's epsilon 1e-6 against torch eps=1e-5: every gradient after the norms moves."""
    report = compare(lm_pair(torch_eps=1e-5, seed=SEED), batch_size=7, devices=4, seed=SEED, strategies=["explicit"])
    failed = _failed_leaves(report)
    assert not report.ok and "outputs" in failed
    assert {"blocks.0.norm1.scale", "norm.scale"} <= failed["gradients"], failed
