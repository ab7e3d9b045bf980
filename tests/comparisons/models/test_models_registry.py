"""The pair registry, lazy imports, and that the agreement check catches broken conversions."""
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import jax
import numpy as np
import pytest
from _helpers_models import assert_models_agree
from flax import linen as nn

from comparisons import models
from comparisons.errors import UsageTypeError
from comparisons.models import ModelPair, flax_nets

ROOT = Path(__file__).resolve().parents[3]


def test_importing_comparisons_and_models_loads_neither_torch_nor_jax():
    code = ("import sys, comparisons, comparisons.models, comparisons.convert\n"
            "comparisons.models.get('cnn_bn')\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'jax', 'flax')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_unknown_pair_name_lists_the_known_ones():
    with pytest.raises(KeyError, match=r"unknown model pair 'resnet'.*'cnn_bn'.*'mlp'"):
        models.get("resnet")


def test_user_pair_is_registered_and_cannot_silently_shadow_another():
    mine = replace(models.get("mlp"), name="my_mlp")
    try:
        assert models.register(mine) is mine and models.get("my_mlp") is mine
        assert "my_mlp" in models.names()
        with pytest.raises(ValueError, match="'my_mlp' exists; pass replace=True"):
            models.register(mine)
        models.register(replace(mine, description="v2"), replace=True)
        assert models.get("my_mlp").description == "v2"
    finally:
        models.pair._REGISTRY.pop("my_mlp", None)


def test_register_refuses_something_that_is_not_a_pair():
    with pytest.raises(TypeError, match="expected a ModelPair, got dict"):
        models.register({"name": "x"})


NOT_MODULES = [("make_torch", value, "torch.nn.Module") for value in (None, "Linear(6, 3)", {"fc": 1}, nn.Dense(3),
                                                                     lambda x: x)] + \
              [("make_flax", value, "flax.linen.Module") for value in (None, "MLP", 3, object())]


@pytest.mark.parametrize("function, returned, expected", NOT_MODULES)
def test_build_refuses_a_make_function_that_returns_no_module(function, returned, expected):
    pair = replace(models.get("mlp"), name="not_a_module", **{function: lambda: returned})
    with pytest.raises(UsageTypeError) as raised:
        pair.build()
    shown = repr(returned)  # a model's repr runs to many lines: then its class alone
    shown = (f"{shown} (a {type(returned).__name__})" if "\n" not in shown and len(shown) <= 80
             else f"a {type(returned).__module__}.{type(returned).__qualname__}")
    assert str(raised.value).startswith(f"ModelPair 'not_a_module': {function}() returned {shown}, not a {expected}")


def build_and_inputs(name, seed=11, batch=4):
    pair = models.get(name)
    torch_module, flax_module, variables = pair.build(seed=seed)
    inputs, targets = pair.make_inputs(batch, seed, np.float32)
    return pair, torch_module, flax_module, variables, inputs, targets


def copied(tree):
    return jax.tree_util.tree_map(lambda leaf: leaf, tree)  # new containers, same leaves


def assert_caught(pair, torch_module, flax_module, variables, inputs, targets, match):
    with pytest.raises(AssertionError, match=match):
        assert_models_agree(pair, torch_module, flax_module, variables, inputs, targets, np.float32,
                            grads=False)


def test_correct_conversion_passes_the_check_the_broken_ones_fail():
    pair, torch_module, flax_module, variables, inputs, targets = build_and_inputs("mlp")
    assert_models_agree(pair, torch_module, flax_module, variables, inputs, targets, np.float32)
    kernel = variables["params"]["fc2"]["kernel"]
    assert kernel.shape[0] == kernel.shape[1]  # square, so a transposed kernel still fits
    broken = copied(variables)
    broken["params"]["fc2"]["kernel"] = kernel.T
    assert_caught(pair, torch_module, flax_module, broken, inputs, targets, "mlp output")


def test_swapped_query_and_key_projections_are_caught():
    pair, torch_module, flax_module, variables, inputs, targets = build_and_inputs("transformer_block")
    broken, attn = copied(variables), variables["params"]["attn"]
    broken["params"]["attn"].update(query=attn["key"], key=attn["query"])
    assert_caught(pair, torch_module, flax_module, broken, inputs, targets, "transformer_block output")


def test_swapped_lstm_gates_are_caught():
    pair, torch_module, flax_module, variables, inputs, targets = build_and_inputs("embedding_lstm")
    cell = variables["params"]["lstm"]["cell"]
    broken = copied(variables)
    broken["params"]["lstm"]["cell"].update({"ii": cell["if"], "if": cell["ii"]})
    assert_caught(pair, torch_module, flax_module, broken, inputs, targets, "embedding_lstm output")


def test_batchnorm_with_torch_momentum_unconverted_is_caught_by_running_stats():
    pair, torch_module, _, variables, inputs, targets = build_and_inputs("cnn_bn")
    wrong = flax_nets.CNNBN(torch_momentum=0.9)  # Flax momentum 0.1 where torch's 0.1 needs 0.9
    assert_caught(pair, torch_module, wrong, variables, inputs, targets, "cnn_bn buffer bn1.running_mean")


class FlaxOwnBatchNorm(nn.BatchNorm):
    """flax.linen.BatchNorm (biased running variance) behind TorchBatchNorm's call signature."""

    def __call__(self, x, train=False):
        return super().__call__(x, use_running_average=not train)


def test_flax_batchnorm_biased_running_variance_is_caught(monkeypatch):
    pair, torch_module, flax_module, variables, inputs, targets = build_and_inputs("cnn_bn")
    monkeypatch.setattr(flax_nets, "TorchBatchNorm", FlaxOwnBatchNorm)
    assert_caught(pair, torch_module, flax_module, variables, inputs, targets, "cnn_bn buffer bn1.running_var")


def test_model_pair_is_a_small_frozen_dataclass():
    pair = models.get("cnn_bn")
    assert isinstance(pair, ModelPair) and pair.has_batch_stats and pair.batch_axis == 0
    with pytest.raises(AttributeError, match="cannot assign to field .name."):
        pair.name = "other"
