"""The causes behind three sweep families that once ended unexplained (issue 24), each pinned by a small test.

- xglm: transformers builds its causal mask as `torch.full(..., torch.finfo(dtype).min)` with no dtype, so
  the float64 reference overflowed float32, torch's default dtype; the float64 torch run now computes under a
  float64 default dtype.
- electra: transformers' Flax Electra fills a missing `token_type_ids` with ones where torch fills zeros; the
  harness passes torch's zeros.
"""
from __future__ import annotations

import os

import _twins
import flax.linen as nn
import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers", reason="needs the hf extra: pip install -e '.[hf]'")
torch = pytest.importorskip("torch")

from comparisons import compare  # noqa: E402
from comparisons.hf import PretrainedCall  # noqa: E402
from comparisons.models import pair_from_modules  # noqa: E402


class TorchMinMask(torch.nn.Module):
    """A linear layer behind a mask built as transformers builds its causal one: no dtype, then cast."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(6, 3)

    def forward(self, x):
        mask = torch.full(x.shape, torch.finfo(x.dtype).min, device=x.device).to(x.dtype)
        return self.fc(torch.where(mask < 0, x, torch.zeros_like(x)))


class FlaxLinear(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool = False):
        return nn.Dense(3, name="fc")(x)


@pytest.mark.parametrize("seed", [0, 3])
def test_a_mask_built_from_the_dtypes_minimum_runs_in_the_float64_reference(seed):
    torch.manual_seed(seed)
    twins = pair_from_modules("min_mask", TorchMinMask(), FlaxLinear(), make_inputs=_twins.regression(),
                              loss_torch=_twins.mse_torch, loss_jax=_twins.mse_jax)
    report = compare(twins, batch_size=5, devices=2, strategies=["explicit"], steps=1, torch_devices="cpu",
                     seed=seed)
    assert report.ok, report.render("markdown")
    assert torch.get_default_dtype() == torch.float32  # the float64 run restores the default


def _flax_electra():
    config = transformers.ElectraConfig(vocab_size=40, embedding_size=16, hidden_size=16, num_hidden_layers=1,
                                        num_attention_heads=2, intermediate_size=32, max_position_embeddings=16,
                                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return transformers.FlaxElectraModel(config, _do_init=False)


@pytest.mark.parametrize("seed", [0, 1])
def test_electra_without_token_types_gets_torchs_zeros_on_the_flax_side(seed):
    import jax

    flax_model = _flax_electra()
    ids = np.random.default_rng(seed).integers(7, 40, size=(3, 5))
    variables = {"params": flax_model.init_weights(jax.random.key(seed), ids.shape)}
    called = PretrainedCall(flax_model, ["input_ids"]).apply(variables, ids)[0]
    zeros = flax_model(ids, token_type_ids=np.zeros_like(ids), params=variables["params"])[0]
    ones = flax_model(ids, params=variables["params"])[0]  # the control: transformers' own Flax fill
    np.testing.assert_array_equal(np.asarray(called), np.asarray(zeros))
    assert np.abs(np.asarray(ones) - np.asarray(zeros)).max() > 1e-3


def _tiny(family: str, seed: int):
    from comparisons.hf import sweep

    torch_class, flax_class = sweep.families()[family]
    config = sweep.tiny_config(family)
    torch.manual_seed(seed)
    return getattr(transformers, torch_class)(config), getattr(transformers, flax_class)(config, _do_init=False)


@pytest.mark.parametrize("seed", [0, 2])
def test_regnet_y_whose_flax_batchnorms_stay_in_inference_mode_is_refused_naming_a_layer(seed):
    from comparisons.hf import TrainingModeIgnored, pair

    with pytest.raises(TrainingModeIgnored, match=r"of [0-9]+ BatchNorm layers .*FlaxRegNetForImageClassification"
                                                  r".*\(e\.g\. regnet/encoder/stages/0/layers/0/layer/0/normaliz"):
        pair("regnet", *_tiny("regnet", seed))
    pair("resnet", *_tiny("resnet", seed))  # the control: ResNet's Flax BatchNorms train, and are not refused


def _opt(seed: int):
    config = transformers.OPTConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, ffn_dim=32,
                                    num_attention_heads=2, max_position_embeddings=16, word_embed_proj_dim=16,
                                    dropout=0.0, attention_dropout=0.0, pad_token_id=1, bos_token_id=0,
                                    eos_token_id=2)
    torch.manual_seed(seed)
    return transformers.OPTForCausalLM(config), transformers.FlaxOPTForCausalLM(config, _do_init=False)


def _tokens(pad: int | None):
    """token ids in 3..39 with `pad` put at two random places of every row (None: no pad id at all)."""
    def make(batch_size, seed, dtype):
        rng = np.random.default_rng(seed)
        ids = rng.integers(3, 40, (batch_size, 6)).astype(np.int32)
        if pad is not None:
            for row in ids:
                row[rng.choice(6, 2, replace=False)] = pad
        return (ids,), rng.integers(3, 40, (batch_size, 6)).astype(np.int32)
    make.vocab, make.length = 40, 6
    return make


@pytest.mark.parametrize("seed", [0, 5])
def test_pad_tokens_in_the_inputs_make_the_padding_row_gradient_a_measured_known_difference(seed):
    from comparisons.hf import pair

    hf_pair = pair("opt", *_opt(seed), make_inputs=_tokens(pad=1))
    report = compare(hf_pair, batch_size=5, devices=2, strategies=["explicit"], steps=1, torch_devices="cpu",
                     seed=seed)
    assert report.ok, report.render("markdown")
    known = [c for c in report.checks if c.subject == "known_difference" and "padding row" in c.compared]
    assert len(known) == 1 and known[0].passed, report.render("markdown")
    assert known[0].max_abs > 1e-4  # Flax's lookup share of row 1, which torch zeroes
    assert "embed_tokens" in known[0].detail and "row 1" in known[0].detail


def test_without_pad_tokens_the_padding_row_is_judged_like_every_other_row():
    from comparisons.hf import pair

    hf_pair = pair("opt", *_opt(1), make_inputs=_tokens(pad=None))
    report = compare(hf_pair, batch_size=5, devices=2, strategies=["explicit"], steps=1, torch_devices="cpu", seed=1)
    assert report.ok, report.render("markdown")
    known = [c for c in report.checks if c.subject == "known_difference" and "padding row" in c.compared]
    assert all(c.passed and c.max_abs < 1e-5 for c in known), report.render("markdown")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_padding_row_that_differs_with_no_pad_id_in_the_inputs_fails_naming_the_row(seed):
    from types import SimpleNamespace

    from comparisons.judge import padding_row_checks

    rng = np.random.default_rng(seed)
    torch_grad = rng.standard_normal((10, 4))
    jax_grad = torch_grad.copy()
    jax_grad[3] += rng.uniform(0.1, 1.0, 4)  # row 3 differs, as a Flax lookup share would make it
    pair = SimpleNamespace(known_differences=("padding_row_gradient",), padding_rows=(("embed.embedding", 3),))

    def runs(grad):
        return [SimpleNamespace(dp=SimpleNamespace(gradients={"embed": {"embedding": torch_grad}})),
                SimpleNamespace(label="jax:explicit", dp=SimpleNamespace(gradients={"embed": {"embedding": grad}}))]
    with_pad = rng.integers(0, 10, (5, 6))
    with_pad[0, 0] = 3
    without_pad = rng.integers(4, 10, (5, 6))
    explained, = padding_row_checks(pair, runs(jax_grad), (with_pad,), 1e-5)
    unexplained, = padding_row_checks(pair, runs(jax_grad), (without_pad,), 1e-5)
    agreeing, = padding_row_checks(pair, runs(torch_grad.copy()), (without_pad,), 1e-5)
    assert explained.passed and explained.max_abs == pytest.approx(np.abs(jax_grad[3] - torch_grad[3]).max())
    assert not unexplained.passed and "embed.embedding row 3" in unexplained.detail
    assert "another difference" in unexplained.detail
    assert agreeing.passed and agreeing.max_abs == 0.0
