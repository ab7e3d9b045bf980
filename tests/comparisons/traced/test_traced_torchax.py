"""The JAX side traced by torchax (comparisons.traced): every strategy on torch models with no Flax twin.

The JAX side runs in a worker process (torchax is never imported here); these tests skip, with one line,
where the pinned torchax pre-release is not installed.
"""
import importlib.util
import sys

import _traced_nets as nets
import numpy as np
import pytest

from comparisons import compare
from comparisons.errors import UsageError
from comparisons.traced import PIN, pair_from_torch

pytestmark = pytest.mark.skipif(importlib.util.find_spec("torchax") is None,
                                reason=f"{PIN} (the auto extra) is not installed: pip install -e '.[auto]'")

CASES = {
    "conv_bn": (nets.conv_bn, nets.images, nets.mse),
    "mlp_layernorm": (nets.mlp_layernorm, nets.rows6, nets.mse),
    "attention_block": (nets.AttentionBlock, nets.sequences8, nets.mse),
    "lstm": (nets.LstmHead, nets.sequences5, nets.mse),
    "gpt2_tiny": (nets.Gpt2Logits, nets.token_ids, nets.next_token),
}


def _compare(name, seed=0, **options):
    factory, make_inputs, loss = CASES[name]
    pair = pair_from_torch(factory, make_inputs=make_inputs, loss_torch=loss)
    return compare(pair, batch_size=7, devices=4, torch_devices="cpu", seed=seed, **options)


def _assert_every_strategy_agrees(report):
    assert report.ok, report.render("table")
    assert "JAX side traced by torchax" in report.model
    assert report.chunk_sizes == [2, 2, 2, 1]
    crossed = {c.compared for c in report.checks if c.subject == "gradients" and "torch DP vs jax:" in c.compared}
    assert crossed == {f"torch DP vs jax:{s} DP" for s in report.strategies}
    assert "torchax" not in sys.modules


def test_conv_net_with_batchnorm_every_strategy_batch_7_on_4_devices():
    report = _compare("conv_bn", seed=int(np.random.default_rng().integers(1000)))
    _assert_every_strategy_agrees(report)
    stats = [c for c in report.checks if c.subject == "batch_stats" and "torch DP vs jax:" in c.compared]
    assert stats and all(c.passed for c in stats)
    leaves = {leaf.path for c in stats for leaf in c.leaves}
    assert {"1.running_mean", "1.running_var", "1.num_batches_tracked"} <= leaves


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mlp_layernorm", "attention_block", "lstm", "gpt2_tiny"])
def test_model_with_no_flax_twin_every_strategy_batch_7_on_4_devices(name):
    if name == "gpt2_tiny":
        pytest.importorskip("transformers")
    _assert_every_strategy_agrees(_compare(name, seed=int(np.random.default_rng().integers(1000))))


def test_a_buffer_updated_in_forward_comes_back_and_is_judged():
    pair = pair_from_torch(nets.CountingBuffer, make_inputs=nets.rows4, loss_torch=nets.mse)
    report = compare(pair, batch_size=7, devices=4, torch_devices="cpu", strategies=["explicit", "sharded"])
    assert report.ok, report.render("table")
    seen = [c for c in report.checks if c.subject == "batch_stats"]
    assert seen and all("seen" in {leaf.path for leaf in c.leaves} for c in seen)


def test_a_buffer_the_trace_cannot_return_is_refused_by_name():
    pair = pair_from_torch(nets.RebindsBuffer, make_inputs=nets.rows4, loss_torch=nets.mse)
    with pytest.raises(UsageError, match="last_mean"):
        compare(pair, batch_size=7, devices=4, torch_devices="cpu", strategies=["explicit"])


def test_a_model_torchax_cannot_trace_is_refused_naming_the_op():
    pair = pair_from_torch(nets.Untraceable, make_inputs=nets.rows4, loss_torch=nets.mse)
    with pytest.raises(UsageError, match="cannot trace this model: .*segment_reduce"):
        compare(pair, batch_size=7, devices=4, torch_devices="cpu", strategies=["explicit"])


def test_run_torch_on_the_command_line(capsys):
    from comparisons.cli import main

    status = main(["run", "--torch", "comparisons.models.torch_nets:CNNBN", "--input-shape", "3,6,6", "--batch", "7",
                   "--strategy", "explicit", "--torch-devices", "cpu", "--precision", "off", "--format", "json"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "JAX side traced by torchax" in out
