"""Conversion errors name the parameter path, the shapes and the fix."""
import numpy as np
import pytest
import torch

from comparisons import models
from comparisons.convert import ConversionError, Layer, flax_to_torch, torch_to_flax

MLP_MAPPING = models.get("mlp").mapping


@pytest.fixture(scope="module")
def mlp():
    torch_module, flax_module, variables = models.get("mlp").build(seed=0)
    return torch_module.state_dict(), variables, models.get("mlp").flax_shapes(flax_module)


def test_unsupported_layer_kind_lists_supported_ones():
    with pytest.raises(ConversionError, match=r"unsupported layer kind 'conv_transpose'.*'batchnorm'"):
        Layer("conv_transpose", "up", "ConvTranspose_0")


def test_mha_without_head_count_is_refused():
    with pytest.raises(ConversionError, match="num_heads=None; pass the attention's head count"):
        Layer("mha", "attn", "attn")


def test_mapping_entry_with_a_wrong_torch_prefix_names_the_missing_key(mlp):
    state, _, _ = mlp
    mapping = [*MLP_MAPPING[:2], Layer("linear", "head", "out")]
    with pytest.raises(ConversionError, match=r"missing torch key 'head.weight' \(keys under 'head': \[\]\)"):
        torch_to_flax(state, mapping)


def test_torch_parameters_left_out_of_the_mapping_are_named(mlp):
    state, _, _ = mlp
    with pytest.raises(ConversionError, match=r"torch keys \['out.weight', 'out.bias'\] are not covered"):
        torch_to_flax(state, MLP_MAPPING[:2])
    assert set(torch_to_flax(state, MLP_MAPPING[:2], strict=False)["params"]) == {"fc1", "fc2"}


def test_flax_leaf_missing_from_the_variables_is_named(mlp):
    _, variables, _ = mlp
    params = {**variables["params"], "fc2": {"bias": variables["params"]["fc2"]["bias"]}}
    with pytest.raises(ConversionError, match="missing Flax leaf 'params.fc2.kernel'"):
        flax_to_torch({"params": params}, MLP_MAPPING)


def test_flax_leaves_left_out_of_the_mapping_are_named(mlp):
    _, variables, _ = mlp
    with pytest.raises(ConversionError, match=r"Flax leaves \['params.out.kernel', 'params.out.bias'\]"):
        flax_to_torch(variables, MLP_MAPPING[:2])


def test_mapping_to_the_wrong_flax_layer_reports_both_shapes(mlp):
    state, _, shapes = mlp
    mapping = [Layer("linear", "fc1", "fc2"), Layer("linear", "fc2", "fc1"), MLP_MAPPING[2]]
    with pytest.raises(ConversionError, match=r"'params.fc2.kernel' from linear layer torch 'fc1'.*"
                                              r"shape \(12, 32\) but the Flax model expects \(32, 32\)"):
        torch_to_flax(state, mapping, like=shapes)


def test_flax_path_that_the_model_lacks_is_named(mlp):
    state, _, shapes = mlp
    mapping = [*MLP_MAPPING[:2], Layer("linear", "out", "head")]
    with pytest.raises(ConversionError, match="produced 'params.head.kernel' but the Flax model has no"):
        torch_to_flax(state, mapping, like=shapes)


def test_torch_model_shape_mismatch_names_the_key(mlp):
    _, variables, _ = mlp
    like = {"fc1.weight": torch.zeros(32, 12), "fc1.bias": torch.zeros(32),
            "fc2.weight": torch.zeros(32, 32), "fc2.bias": torch.zeros(32),
            "out.weight": torch.zeros(6, 32), "out.bias": torch.zeros(6)}
    with pytest.raises(ConversionError, match=r"'out.weight' .* shape \(5, 32\) but the torch model "
                                              r"expects \(6, 32\)"):
        flax_to_torch(variables, MLP_MAPPING, like=like)


def test_bias_that_does_not_fit_the_weight_is_refused():
    state = {"fc.weight": np.zeros((3, 4), np.float32), "fc.bias": np.zeros(4, np.float32)}
    with pytest.raises(ConversionError, match=r"linear layer torch 'fc'.*bias has shape \(4,\), "
                                              r"expected \(3,\) to match the weight"):
        torch_to_flax(state, [Layer("linear", "fc", "fc")])


def test_packed_attention_weight_of_wrong_shape_is_refused():
    state = {"a.in_proj_weight": np.zeros((8, 4)), "a.out_proj.weight": np.zeros((4, 4))}
    with pytest.raises(ConversionError, match=r"in_proj_weight has shape \(8, 4\), expected \(3\*E, E\)"):
        torch_to_flax(state, [Layer("mha", "a", "a", num_heads=2)])


def test_head_count_that_does_not_divide_the_width_is_refused():
    state = torch.nn.MultiheadAttention(6, 2).state_dict()
    with pytest.raises(ConversionError, match="E=6 divisible by num_heads=4"):
        torch_to_flax(state, [Layer("mha", "", "attn", num_heads=4)])


def test_stacked_lstm_layers_are_not_silently_dropped():
    state = torch.nn.LSTM(3, 4, num_layers=2).state_dict()
    with pytest.raises(ConversionError, match=r"\['weight_ih_l1', 'weight_hh_l1', .*not covered"):
        torch_to_flax(state, [Layer("lstm", "", "cell")])


def test_bfloat16_weights_are_refused_with_the_fix():
    state = torch.nn.Linear(2, 2).to(torch.bfloat16).state_dict()
    with pytest.raises(ConversionError, match="'weight' is bfloat16.*module.float()"):
        torch_to_flax(state, [Layer("linear", "", "fc")])


def test_mapping_entries_may_be_plain_tuples(mlp):
    state, variables, _ = mlp
    as_tuples = [(e.kind, e.torch, e.flax) for e in MLP_MAPPING]
    converted = torch_to_flax(state, as_tuples)
    assert np.array_equal(converted["params"]["out"]["kernel"], variables["params"]["out"]["kernel"])
