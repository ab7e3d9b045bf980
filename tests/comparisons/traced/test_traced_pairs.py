"""comparisons.traced without torchax: what pair_from_torch refuses before any work, and the missing extra."""
import importlib.util

import _traced_nets as nets
import pytest

from comparisons import compare
from comparisons.errors import UsageError
from comparisons.traced import PIN, pair_from_torch


def test_a_loss_the_worker_cannot_import_is_refused_before_any_work():
    with pytest.raises(UsageError, match="loss_torch=.*cannot be sent to the JAX worker"):
        pair_from_torch(nets.conv_bn, make_inputs=nets.images, loss_torch=lambda out, y: (out - y).pow(2).mean())


def test_the_pair_keeps_torchs_names_and_declares_a_tied_or_unsaved_tensor():
    pytest.importorskip("transformers")
    pair = pair_from_torch(nets.Gpt2Logits, make_inputs=nets.token_ids, loss_torch=nets.next_token)
    assert "model.transformer.wte.weight" in pair.parameter_names
    assert "model.lm_head.weight" not in pair.parameter_names and pair.is_torch_only("model.lm_head.weight")
    conv = pair_from_torch(nets.conv_bn, make_inputs=nets.images, loss_torch=nets.mse)
    assert conv.buffer_names == ("1.running_mean", "1.running_var", "1.num_batches_tracked")
    assert not conv.is_torch_only("1.num_batches_tracked")  # traced, so compared like any buffer


def test_without_the_auto_extra_the_comparison_says_how_to_install_it(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torchax" else real(name, *a))
    pair = pair_from_torch(nets.mlp_layernorm, make_inputs=nets.rows6, loss_torch=nets.mse)
    with pytest.raises(UsageError, match=rf"{PIN}.*pip install 'dp-compare\[auto\]'"):
        compare(pair, batch_size=7, devices=4, torch_devices="cpu", strategies=["explicit"], precision="off")
