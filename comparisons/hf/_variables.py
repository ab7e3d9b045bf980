"""Variables converted by transformers' own converter, for the checking route."""
from __future__ import annotations

from typing import Any


def from_pt_variables(torch_model: Any, flax_model: Any) -> dict:
    """Flax variables converted by transformers' own converter (`from_pt`'s), for the checking route.

    Uses `convert_pytorch_state_dict_to_flax` on a copy of the state dict, with the Flax model's
    parameter shapes (a model made with `_do_init=False` works: its `params_shape_tree` is used).
    Leaves the converter produces for weights the Flax model lacks (a tied lm_head) are dropped,
    as `from_pretrained` drops them.
    """
    from flax.traverse_util import flatten_dict, unflatten_dict
    from transformers.modeling_flax_pytorch_utils import convert_pytorch_state_dict_to_flax

    shapes = flax_model.params_shape_tree if not getattr(flax_model, "_is_initialized", True) else flax_model.params
    stand_in = type("ShapesOnly", (), {"params": shapes, "base_model_prefix": flax_model.base_model_prefix})()
    state = {k: v.detach().clone() for k, v in torch_model.state_dict().items()}
    converted = convert_pytorch_state_dict_to_flax(state, stand_in)
    expected = flatten_dict(shapes)
    return unflatten_dict({k: v for k, v in flatten_dict(converted).items() if k in expected})
