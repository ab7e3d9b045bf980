"""Weights between a torch `state_dict` and Flax linen variables, layer by layer, both ways.

    _convert.py  Layer, the four conversions (weights and gradients, each way), register_rule
    _nnx.py      torch_to_nnx / nnx_to_torch: a Flax NNX module's state through the same rules
    _rules.py    one exact Rule per layer kind (linear, conv, batchnorm, layernorm, embedding, mha, lstm),
                 with its Activations (the layout of its inputs and outputs)

The bottom layer of comparisons beside `verdicts` and `placement`; imports neither torch nor JAX.
The table of kinds and layouts is in `_convert.py`'s docstring.
"""
from comparisons.convert._convert import (
    RULES,
    Activations,
    ConversionError,
    FlaxLeaf,
    Layer,
    Rule,
    channels_last,
    flax_grads_to_torch,
    flax_leaf,
    flax_momentum,
    flax_to_torch,
    kind_of,
    register_rule,
    torch_grads_to_flax,
    torch_to_flax,
)
from comparisons.convert._nnx import nnx_key, nnx_to_torch, torch_to_nnx, use_mapping_deriver
from comparisons.convert._rules import channels_last_inputs

__all__ = ["RULES", "Activations", "ConversionError", "FlaxLeaf", "Layer", "Rule", "flax_grads_to_torch", "flax_leaf",
           "flax_momentum",
           "flax_to_torch", "channels_last", "channels_last_inputs", "kind_of", "nnx_key", "nnx_to_torch",
           "register_rule", "torch_grads_to_flax", "torch_to_flax", "torch_to_nnx", "use_mapping_deriver"]
