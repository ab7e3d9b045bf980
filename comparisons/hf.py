"""Hugging Face pairs: a transformers torch model and its Flax twin through the harness, as they are.

    from comparisons import hf
    pair = hf.pair("gpt2-tiny", torch_model, flax_model, make_inputs=hf.token_inputs(vocab=50, length=7))

`pair` derives the mapping from parameter paths (the two libraries name modules alike), adds the
conversion rules transformers' layers need (GPT-2's Conv1D, ViT's bare cls_token and
position_embeddings), translates `train` into Flax's `deterministic`, fills the attention mask and
positions Flax's GPT-2 module takes as arguments, and declares what exists on one side only.
Needs the `hf` extra (`pip install -e '.[hf]'`, or `.[dev]`, which includes it; transformers < 5:
version 5 dropped the Flax models).
Importing this module imports JAX (not torch nor transformers) to give it compare()'s CPU devices
before transformers' Flax models start it (see `_reserve_cpu_devices`).
"""
from __future__ import annotations

import inspect
import logging
import numbers
from collections.abc import Callable
from typing import Any

import numpy as np

from comparisons.convert import RULES, Activations, Rule, channels_last, register_rule
from comparisons.errors import ComparisonError, UsageTypeError
from comparisons.models.derive import FlaxApply, pair_from_modules
from comparisons.models.pair import ModelPair

__all__ = ["cross_entropy_jax", "cross_entropy_torch", "flax_apply", "from_pt_variables", "image_inputs",
           "pair", "register_rules", "token_inputs"]


def _conv1d_to_flax(t, layer, check):
    w = t["weight"]  # transformers' Conv1D stores (in, out) and computes x @ w; Flax's kernel is (out, in)
    check(w.ndim == 2, "weight", w.shape, "a 2-D (in, out) matrix as in transformers' Conv1D")
    out = {("params", "kernel"): w.T}
    if "bias" in t:
        check(t["bias"].shape == (w.shape[1],), "bias", t["bias"].shape, f"({w.shape[1]},) to match the weight")
        out[("params", "bias")] = t["bias"]
    return out


def _conv1d_to_torch(f, layer, check):
    k = f[("params", "kernel")]
    check(k.ndim == 2, "kernel", k.shape, "a 2-D (out, in) matrix as in FlaxConv1D")
    out = {"weight": k.T}
    if ("params", "bias") in f:
        out["bias"] = f[("params", "bias")]
    return out


def _bare(names: tuple[str, ...]) -> tuple[Callable, Callable]:
    """A rule for parameters a module holds itself, copied as they are (same name both sides)."""
    def to_flax(t, layer, check):
        return {("params", n): t[n] for n in names if n in t}

    def to_torch(f, layer, check):
        return {n: f[("params", n)] for n in names if ("params", n) in f}
    return to_flax, to_torch


_VIT_EMBEDDINGS = ("cls_token", "position_embeddings", "mask_token")
_RULES = {
    "hf_conv1d": (Rule(("weight", "bias"), ("weight",), (), _conv1d_to_flax, _conv1d_to_torch),
                  ("transformers.pytorch_utils.Conv1D",)),
    "hf_vit_embeddings": (Rule(_VIT_EMBEDDINGS, ("cls_token", "position_embeddings"), (), *_bare(_VIT_EMBEDDINGS),
                                activations=Activations(inputs=channels_last)),  # pixel values NCHW -> NHWC
                          ("transformers.models.vit.modeling_vit.ViTEmbeddings",)),
}


def register_rules() -> None:
    """Register the transformers layer rules (idempotent; done on import of this module)."""
    for kind, (rule, types) in _RULES.items():
        if kind not in RULES:
            register_rule(kind, rule, torch_types=types)


register_rules()


def _reserve_cpu_devices(count: int = 8) -> None:
    """Give JAX compare()'s default CPU device count now, unless chosen already or JAX has started.

    Building a transformers Flax model (even with `_do_init=False`) starts JAX, after which its
    CPU device count is fixed at one and compare(devices=2) cannot run; compare() would set this
    count itself had JAX not started. Costs the import of JAX.
    """
    from comparisons.runs import set_jax_cpu_devices

    set_jax_cpu_devices(count)


_reserve_cpu_devices()

# transformers 4.x logs this once per process when a Flax model is built (logger.warning_once, not
# warnings.warn, so warnings.filterwarnings cannot reach it): the `hf` extra pins transformers < 5
# on purpose, and the line says nothing about the comparison. Only this message of that logger.
_FLAX_DEPRECATION = "TensorFlow and JAX classes are deprecated and will be removed in Transformers v5"


def _drop_flax_deprecation(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith(_FLAX_DEPRECATION)


logging.getLogger("transformers.modeling_flax_utils").addFilter(_drop_flax_deprecation)


def flax_apply(flax_model: Any) -> FlaxApply:
    """A transformers Flax model (or its `.module`) as the harness calls it.

    `train` becomes `deterministic=not train`; arguments the module requires but a user rarely
    passes (GPT-2's attention_mask and position_ids) are filled per chunk, as the model's own
    `__call__` fills them: all-ones mask, positions 0..T-1.
    """
    module = getattr(flax_model, "module", flax_model)
    required = [name for name, p in inspect.signature(module.__call__).parameters.items()
                if p.default is inspect.Parameter.empty and p.kind is p.POSITIONAL_OR_KEYWORD]
    return FlaxApply(module, train_arg="deterministic", prepare=_filler(required))


def _filler(required: list[str]) -> Callable[[tuple], tuple] | None:
    fillable = {"attention_mask", "position_ids"}
    missing = [n for n in required[1:] if n in fillable]
    if not missing:
        return None

    def prepare(inputs: tuple) -> tuple:
        import jax.numpy as jnp

        ids = inputs[0]
        filled = {"attention_mask": jnp.ones_like(ids),
                  "position_ids": jnp.broadcast_to(jnp.arange(ids.shape[-1]), ids.shape)}
        return (ids, *inputs[1:], *(filled[n] for n in missing[len(inputs) - 1:]))
    return prepare


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


def pair(name: str, torch_model: Any, flax_model: Any, *, make_inputs: Callable[[int, int, Any], tuple],
         loss_torch: Callable | None = None, loss_jax: Callable | None = None, variables: Any = None,
         **overrides: Any) -> ModelPair:
    """A ModelPair from a transformers torch model and its Flax twin (same config), derived by path.

    Args:
      make_inputs: (batch_size, seed, dtype) -> (inputs, targets) in torch's layout, e.g.
        `token_inputs(...)`, `image_inputs(...)`; images are NCHW for torch, NHWC for Flax.
      loss_torch / loss_jax: default: cross-entropy of the output's `logits` against the targets.
      variables: Flax variables converted elsewhere (`from_pt_variables`, `from_pretrained(from_pt=True)
        .params`): used as they are and checked bitwise against the derived conversion.
      **overrides: passed to `pair_from_modules` (flax_path, torch_only, flax_only, ...).
    Declares torch-only: the torch cache output (`past_key_values`; Flax returns none unless asked);
    known difference: Flax BatchNorm's biased running variance, when the pair has BatchNorm.
    """
    _check_models(name, torch_model, flax_model, make_inputs)
    images = getattr(make_inputs, "layout", None) == "NCHW"
    has_bn = any("BatchNorm" in type(m).__name__ for m in torch_model.modules())
    declared = {"torch_only": ("past_key_values*",),
                "known_differences": ("flax_batchnorm_biased_var",) if has_bn else ()}
    for key, value in declared.items():
        overrides[key] = tuple(dict.fromkeys([*value, *overrides.get(key, ())]))
    return pair_from_modules(
        name, torch_model, flax_apply(flax_model), make_inputs=make_inputs,
        loss_torch=loss_torch or cross_entropy_torch, loss_jax=loss_jax or cross_entropy_jax,
        variables=variables, to_flax_inputs=_nchw_to_nhwc if images else None,
        description=overrides.pop("description", f"transformers {type(torch_model).__name__}"), **overrides)


def _check_models(name: str, torch_model: Any, flax_model: Any, make_inputs: Any) -> None:
    """Refuse what is not a torch model, a Flax model or a make_inputs, and tokens the model cannot embed."""
    import flax.linen as nn
    import torch

    where = f"hf.pair({name!r})"
    if not isinstance(torch_model, torch.nn.Module):
        raise UsageTypeError(f"{where}: torch_model={torch_model!r} is not a torch.nn.Module; pass the transformers "
                             "torch model, e.g. GPT2LMHeadModel(config)")
    if not isinstance(getattr(flax_model, "module", flax_model), nn.Module):
        raise UsageTypeError(f"{where}: flax_model={flax_model!r} is not a transformers Flax model nor a "
                             "flax.linen.Module; pass its Flax twin, e.g. FlaxGPT2LMHeadModel(config, _do_init=False)")
    if not callable(make_inputs):
        raise UsageTypeError(f"{where}: make_inputs={make_inputs!r} is not callable; pass (batch_size, seed, dtype) "
                             "-> (inputs, targets), e.g. hf.token_inputs(vocab=50, length=7)")
    config = getattr(torch_model, "config", None)
    for argument, limit_name in (("length", "n_positions"), ("length", "max_position_embeddings"),
                                 ("vocab", "vocab_size")):
        value, limit = getattr(make_inputs, argument, None), getattr(config, limit_name, None)
        if isinstance(value, int) and isinstance(limit, int) and value > limit:
            what = f"tokens of length {value}" if argument == "length" else f"token ids up to {value - 1}"
            raise ComparisonError(f"{where}: make_inputs=token_inputs({argument}={value}) makes {what}, but "
                                  f"{type(torch_model).__name__}'s config has {limit_name}={limit}; pass "
                                  f"token_inputs({argument} <= {limit}, ...)")


def _logits(output: Any) -> Any:
    return output["logits"] if isinstance(output, dict) or hasattr(output, "keys") else output.logits


def cross_entropy_torch(output: Any, labels: Any) -> Any:
    """Mean cross-entropy of `output.logits` (..., classes) against integer labels (...)."""
    import torch

    logits = _logits(output)
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                             torch.as_tensor(labels).long().reshape(-1))


def cross_entropy_jax(output: Any, labels: Any) -> Any:
    """The same loss in JAX."""
    import optax

    return optax.softmax_cross_entropy_with_integer_labels(output.logits, labels).mean()


def token_inputs(vocab: int, length: int) -> Callable[[int, int, Any], tuple]:
    """make_inputs for a language model: token ids (B, length) and next-token-like labels (B, length)."""
    _positive("token_inputs", vocab=vocab, length=length)

    def make(batch_size: int, seed: int, dtype: Any) -> tuple:
        rng = np.random.default_rng(seed)
        ids = rng.integers(0, vocab, (batch_size, length)).astype(np.int32)
        return (ids,), rng.integers(0, vocab, (batch_size, length)).astype(np.int32)
    make.vocab, make.length = vocab, length  # type: ignore[attr-defined]  # hf.pair checks them against the config
    return make


def image_inputs(channels: int, size: int, classes: int) -> Callable[[int, int, Any], tuple]:
    """make_inputs for an image classifier: NCHW pixels (B, channels, size, size) and labels (B,)."""
    _positive("image_inputs", channels=channels, size=size, classes=classes)

    def make(batch_size: int, seed: int, dtype: Any) -> tuple:
        rng = np.random.default_rng(seed)
        pixels = rng.standard_normal((batch_size, channels, size, size)).astype(dtype)
        return (pixels,), rng.integers(0, classes, batch_size).astype(np.int32)
    make.layout = "NCHW"  # type: ignore[attr-defined]
    return make


def _nchw_to_nhwc(inputs: tuple) -> tuple:
    return tuple(np.transpose(x, (0, 2, 3, 1)) for x in inputs)


def _positive(function: str, **arguments: Any) -> None:
    for argument, value in arguments.items():
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            kind = "" if type(value) is int else f" (a {type(value).__name__})"
            raise ComparisonError(f"hf.{function}: {argument}={value!r}{kind}; pass a positive integer, e.g. "
                                  f"{function}({argument}=8, ...)")
