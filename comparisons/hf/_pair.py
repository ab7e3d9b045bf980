"""`hf.pair`: a ModelPair from a transformers torch model and its Flax twin, everything else derived from the two.

What it derives (inputs, loss, the Flax call, one-sided declarations, known differences, padding rows) is
here; each piece it uses lives in its own module of this folder (`__init__.py` lists them).
"""
from __future__ import annotations

import dataclasses
from typing import Any

from comparisons.convert import channels_last_inputs
from comparisons.errors import UsageError
from comparisons.hf._calling import PretrainedCall, call_signature, flax_apply
from comparisons.hf._checks import (
    absent_in_flax,
    check_flax_only,
    check_models,
    check_training_mode,
    check_versions,
    probe_outputs,
    unreached_parameters,
)
from comparisons.hf._inputs import MakeInputs, decoder_starts_with_pad, derived_inputs
from comparisons.hf._losses import cross_entropy_jax, cross_entropy_torch, head_of, hidden_square_losses, labels_for
from comparisons.hf._mismatch import check_no_dropout, check_twins
from comparisons.hf._rules import register_own_parameter_rules, register_rules
from comparisons.models.derive import padding_rows, pair_from_modules
from comparisons.models.pair import ModelPair


def pair(name: str, torch_model: Any, flax_model: Any, *, make_inputs: MakeInputs | None = None,
         loss_torch: Any = None, loss_jax: Any = None, variables: Any = None, **overrides: Any) -> ModelPair:
    """A ModelPair from a transformers torch model and its Flax twin (same config), everything derived.

    Args:
      make_inputs: (batch_size, seed, dtype) -> (inputs, targets) in torch's `forward` order, e.g.
        `token_inputs(...)`, `image_inputs(...)`. Default: derived from the model (its main input,
        decoder ids for a seq2seq model, labels shaped like the head's logits).
      loss_torch / loss_jax: default: cross-entropy of `logits` against the targets, or the mean
        square of the main hidden state for a model without logits.
      variables: Flax variables converted elsewhere (`from_pt_variables`, `from_pretrained(from_pt=True)
        .params`): used as they are and checked bitwise against the derived conversion.
      **overrides: passed to `pair_from_modules` (flax_path, torch_only, flax_only, ...); declarations
        are added to the derived ones.
    Raises UsageError naming the mismatch when the two models are not twins (family, head, config keys) or
    `variables` do not fit the Flax model; ComparisonError naming the config keys and torch modules when dropout
    is on (torch and JAX draw different masks). Raises VersionNote when the family cannot run with the
    installed versions, BatchDependentOutput for an output no DataParallel can gather, TrainingModeIgnored for
    a Flax port whose BatchNorm layers stay in inference mode while training. Costs two torch forwards on
    batches of 2 and 3 (the probe), two more with dropout rates in the config and no active nn.Dropout, and
    one trace of the Flax init; with batch statistics, one Flax init and training forward more.
    """
    register_rules()  # on first use (idempotent): transformers' layers convert by these rules
    _check_losses(name, loss_torch, loss_jax)
    check_models(name, torch_model, flax_model, make_inputs)
    check_twins(name, torch_model, flax_model, variables)  # one family, one head, one config
    # the user's inputs may hold a pad id; derived ones only where the decoder starts with it (Marian)
    given_inputs = make_inputs is not None or decoder_starts_with_pad(torch_model)
    pretrained = hasattr(flax_model, "init_weights") and hasattr(flax_model, "module")
    if pretrained:
        check_versions(name, flax_model)
    inputs_of = make_inputs or derived_inputs(torch_model, labels=None)
    shapes = probe_outputs(name, torch_model, lambda b: inputs_of(b, 0, _float32())[0])
    check_no_dropout(name, torch_model, inputs_of(2, 0, _float32())[0])
    field, shape = head_of(shapes)
    if make_inputs is None:
        make_inputs = derived_inputs(torch_model, labels=labels_for(shape) if field == "logits" else None)
    default_losses = (cross_entropy_torch, cross_entropy_jax) if field == "logits" else hidden_square_losses(field)
    apply, to_flax = _flax_call(torch_model, flax_model, make_inputs, pretrained)
    if pretrained:
        check_training_mode(name, apply, make_inputs(2, 0, _float32())[0])
    derived_only: list[str] = []
    if pretrained:
        flat = _flat_variables(variables, flax_model)
        register_own_parameter_rules(torch_model, flat)
        check_flax_only(name, torch_model, flat)  # after: a module holding parameters itself now has a rule
        unreached = unreached_parameters(torch_model, inputs_of(2, 0, _float32())[0], field)
        derived_only = absent_in_flax(torch_model, flat, unreached)
    _declare(torch_model, overrides, derived_only, padding=given_inputs)
    description = overrides.pop("description", f"transformers {type(torch_model).__name__}")
    built = pair_from_modules(
        name, torch_model, apply, make_inputs=make_inputs,
        loss_torch=loss_torch or default_losses[0], loss_jax=loss_jax or default_losses[1],
        variables=variables, to_flax_inputs=to_flax, description=description, **overrides)
    return dataclasses.replace(built, padding_rows=padding_rows(torch_model, built.mapping))


def _float32() -> Any:
    import numpy as np
    return np.float32


def _check_losses(name: str, loss_torch: Any, loss_jax: Any) -> None:
    """One loss given alone would be compared against the other side's derived loss: a `port` for nothing."""
    if (loss_torch is None) != (loss_jax is None):
        given, missing = ("loss_torch", "loss_jax") if loss_jax is None else ("loss_jax", "loss_torch")
        raise UsageError(f"hf.pair {name!r}: {given}= without {missing}=; the other side would train on the derived "
                         f"loss, not on yours; pass {missing}= (the same loss in the other framework) too, or "
                         "neither for the derived pair")


def _flax_call(torch_model: Any, flax_model: Any, make_inputs: MakeInputs, pretrained: bool) -> tuple:
    """(the Flax callable, to_flax_inputs): the model's own __call__ by keyword, or a bare module positionally."""
    if not pretrained:
        images = getattr(make_inputs, "layout", None) == "NCHW"
        return flax_apply(flax_model), (channels_last_inputs if images else None)
    names = getattr(make_inputs, "input_names", None)
    if names is None:
        count = len(make_inputs(1, 0, _float32())[0])
        names = call_signature(torch_model)[:count]
    return PretrainedCall(flax_model, names), None


def _declare(torch_model: Any, overrides: dict, torch_only: list[str], *, padding: bool) -> None:
    """Add the derived one-sided declarations to the user's (never replacing them): the torch cache
    output, and torch parameters with no Flax twin that are frozen or that the output never reaches;
    `padding`: the inputs may hold pad ids (the user's, or derived decoder ids that start with it)."""
    known = _known(torch_model) + (("padding_row_gradient",) if padding and padding_rows(torch_model, None) else ())
    declared = {"torch_only": ("past_key_values*", *torch_only), "known_differences": known}
    for key, value in declared.items():
        overrides[key] = tuple(dict.fromkeys([*value, *overrides.get(key, ())]))


# torch layers that keep part of the computation in float32 whatever the model's dtype (transformers'
# rotary embeddings under autocast(enabled=False), fixed sinusoidal tables, ALiBi, attention cast up), or
# whose Flax twin does (Flax BART's and mBART's sequence classifiers build their head without the dtype)
_FLOAT32_LAYERS = ("Rotary", "Sinusoidal", "GPTNeoSelfAttention", "BloomModel", "GPTJAttention",
                   "BartClassificationHead")


def _known(torch_model: Any) -> tuple[str, ...]:
    """The KNOWN_DIFFERENCES the torch model's layers imply (each then measured, never silenced)."""
    classes = [type(m).__name__ for m in torch_model.modules()]
    found = []
    if any("BatchNorm" in c for c in classes):
        found.append("flax_batchnorm_biased_var")
    if any(marker in c for c in classes for marker in _FLOAT32_LAYERS):
        found.append("float32_islands")
    if any(not p.requires_grad for p in torch_model.parameters()):
        found.append("frozen_in_torch")
    if any(k for m in torch_model.modules() for k, v in m._buffers.items()
           if v is not None and v.is_floating_point() and k not in m._non_persistent_buffers_set
           and "BatchNorm" not in type(m).__name__):
        found.append("torch_buffer_flax_parameter")
    return tuple(found)


def _flat_variables(variables: Any, flax_model: Any) -> dict:
    from flax.traverse_util import flatten_dict

    tree = dict(variables) if variables is not None else dict(
        flax_model.params_shape_tree if not getattr(flax_model, "_is_initialized", True) else flax_model.params)
    return flatten_dict(tree if "params" in tree else {"params": tree})
