"""GPT-2 with its cache (transformers' DynamicCache): stock nn.DataParallel gathers it, and so does dp_torch.

Checked against stock torch.nn.parallel through the CPU oracle; skipped without the hf extra.
"""
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
transformers = pytest.importorskip("transformers", reason="needs the hf extra: pip install -e '.[hf]'")

import copy  # noqa: E402

import torch  # noqa: E402
from _helpers_oracle import assert_same_tree, record  # noqa: E402
from torch_oracle import stock  # noqa: E402, F401  (pytest fixture)

import dp_torch  # noqa: E402


def gpt2_with_cache():
    config = transformers.GPT2Config(n_embd=16, n_layer=2, n_head=2, vocab_size=40, n_positions=16,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=True)
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(config)


@pytest.mark.parametrize(("batch", "n"), [(5, 2), (4, 4)])
def test_gpt2_output_with_dynamic_cache_is_gathered_as_stock_gathers_it(stock, batch, n):
    model = gpt2_with_cache()
    twin = copy.deepcopy(model)
    ids = torch.randint(0, 40, (batch, 7), generator=torch.Generator().manual_seed(batch))
    expected = record(lambda: stock.DataParallel(model, device_ids=stock.devices(n))(ids), model)
    actual = record(lambda: dp_torch.DataParallel(twin, device_ids=["cpu"] * n)(ids), twin)
    assert expected.error is None and actual.error is None, (expected.error, actual.error)
    assert type(actual.output) is type(expected.output) and list(actual.output) == ["logits", "past_key_values"]
    assert_same_tree(expected.output["logits"], actual.output["logits"], rtol=1e-6, atol=1e-6)
    cache, stock_cache = actual.output["past_key_values"], expected.output["past_key_values"]
    assert type(cache) is type(stock_cache) is transformers.DynamicCache
    assert_same_tree(list(stock_cache), list(cache), rtol=1e-6, atol=1e-6)
    assert cache[0][0].shape == (batch, 2, 7, 8)
    for name, grad in expected.grads.items():
        torch.testing.assert_close(actual.grads[name], grad, rtol=1e-5, atol=1e-6, msg=name)
