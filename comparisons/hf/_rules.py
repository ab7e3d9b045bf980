"""Conversion rules for transformers' own layers, registered through the public registry.

- `hf_conv1d`: GPT-2's Conv1D stores its weight (in, out) and computes x @ w; Flax's kernel is that
  matrix as is, so torch -> Flax transposes twice (once for the layout, once for nn.Linear's).
- own parameters: a module that holds parameters itself (LM-head bias, RMSNorm weight, cls_token,
  layer-scale lambdas, logit_scale, final_logits_bias) gets a same-name copy rule made for its class,
  renamed the way transformers' converter renames a leaf (`weight` -> `scale`, `kernel` or
  `embedding`, transposing a kernel) when the Flax module has no leaf of the torch name.
- weight norm: torch's parametrization (`parametrizations.weight.original0/1`) is Flax's
  `weight_g`/`weight_v` (wav2vec2's positional convolution).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from comparisons.convert import RULES, Activations, Rule, channels_last, kind_of, register_rule


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


def bare(names: tuple[str, ...], flax_names: Mapping[str, tuple[str, bool]] | None = None
         ) -> tuple[Callable, Callable]:
    """to_flax/to_torch for parameters a module holds itself: torch `name` -> Flax (leaf, transposed?).

    The default keeps the name and the layout. A transposed leaf reverses the axes (transformers'
    converter does so for a 2-D `weight` that becomes a `kernel`; a 4-D one is (2, 3, 1, 0)).
    """
    leaf = {n: (flax_names or {}).get(n, (n, False)) for n in names}

    def to_flax(t, layer, check):
        return {("params", leaf[n][0]): _layout(t[n], leaf[n][1], to_flax=True) for n in names if n in t}

    def to_torch(f, layer, check):
        return {n: _layout(f[("params", leaf[n][0])], leaf[n][1], to_flax=False) for n in names
                if ("params", leaf[n][0]) in f}
    return to_flax, to_torch


def _layout(array: Any, transposed: bool, *, to_flax: bool) -> Any:
    if not transposed:
        return array
    if array.ndim == 4:
        return np.transpose(array, (2, 3, 1, 0) if to_flax else (3, 2, 0, 1))
    return np.transpose(array)


_WEIGHT_NORM = ("parametrizations.weight.original0", "parametrizations.weight.original1", "bias")


def _weight_norm_to_flax(t, layer, check):
    # torch's original0 (the norm g, (1, 1, k) for dim=2) and original1 (the direction v, (O, I/groups, k))
    # are transformers' Flax weight_g and weight_v as they are (FlaxWav2Vec2WeightNormConv1D keeps torch's layout)
    out = {("params", "weight_g"): t["parametrizations.weight.original0"],
           ("params", "weight_v"): t["parametrizations.weight.original1"]}
    if "bias" in t:
        out[("params", "bias")] = t["bias"]
    return out


def _weight_norm_to_torch(f, layer, check):
    out = {"parametrizations.weight.original0": f[("params", "weight_g")],
           "parametrizations.weight.original1": f[("params", "weight_v")]}
    if ("params", "bias") in f:
        out["bias"] = f[("params", "bias")]
    return out


_VIT_EMBEDDINGS = ("cls_token", "position_embeddings", "mask_token")
_RULES = {
    "hf_conv1d": (Rule(("weight", "bias"), ("weight",), (), _conv1d_to_flax, _conv1d_to_torch),
                  ("transformers.pytorch_utils.Conv1D",)),
    "hf_vit_embeddings": (Rule(_VIT_EMBEDDINGS, ("cls_token", "position_embeddings"), (), *bare(_VIT_EMBEDDINGS),
                               activations=Activations(inputs=channels_last)),  # pixel values NCHW -> NHWC
                          ("transformers.models.vit.modeling_vit.ViTEmbeddings",)),
}


def register_rules() -> None:
    """Register the transformers layer rules (idempotent; done on import of comparisons.hf)."""
    for kind, (rule, types) in _RULES.items():
        if kind not in RULES:
            register_rule(kind, rule, torch_types=types)


def register_own_parameter_rules(torch_model: Any, flax_params: Mapping[tuple, Any]) -> list[str]:
    """Give every module class of `torch_model` that holds parameters and has no rule a same-name rule.

    Args:
      torch_model: the transformers torch model.
      flax_params: the Flax twin's flattened variables ({('params', 'a', 'b', 'leaf'): shape-like}).
    Returns the kinds registered. A weight-normed module (torch's parametrization) gets the
    weight-norm rule; any other gets a copy rule whose Flax leaf names are read from the Flax
    variables at the module's path. Registration is process-wide, keyed by the module's class.
    """
    registered = []
    for prefix, module in torch_model.named_modules():
        names = _own_names(module)
        weight_normed = any(n.startswith("parametrizations.") for n in names)
        if not names or (kind_of(module) is not None and not weight_normed):
            continue
        kind = f"hf_own:{type(module).__module__}.{type(module).__qualname__}"
        if weight_normed:
            rule = Rule(_WEIGHT_NORM, _WEIGHT_NORM[:2], (), _weight_norm_to_flax, _weight_norm_to_torch)
        else:
            leaves = _flax_leaf_names(prefix, names, module, flax_params)
            rule = Rule(tuple(names), (), (), *bare(tuple(names), leaves),
                        flax_names={n: leaf for n, (leaf, _) in leaves.items()})
        register_rule(kind, rule, torch_types=[type(module)], replace=True)
        registered.append(kind)
    return registered


def _own_names(module: Any) -> list[str]:
    """Parameters (and persistent buffers) a module holds itself, parametrized weights included."""
    names = [k for k, v in module._parameters.items() if v is not None]
    names += [k for k, v in module._buffers.items() if v is not None and k not in module._non_persistent_buffers_set]
    parametrized = getattr(module, "parametrizations", None)
    if parametrized is not None:
        for attribute, plist in parametrized.items():
            names += [f"parametrizations.{attribute}.{k}" for k, _ in plist.named_parameters()]
    return names


_RENAMES = (("weight", "scale", False), ("weight", "kernel", True), ("weight", "embedding", False))


def _flax_leaf_names(prefix: str, names: list[str], module: Any, flax_params: Mapping[tuple, Any]
                     ) -> dict[str, tuple[str, bool]]:
    """{torch name: (Flax leaf, transposed)}: the same name where the Flax module has it, else
    transformers' converter's rename; a name neither finds keeps its own (the conversion then fails
    naming it)."""
    here = ("params", *[p for p in prefix.split(".") if p])
    leaves = {key[-1] for key in flax_params if key[:-1] == here}
    found = {}
    for name in names:
        if name in leaves:
            found[name] = (name, False)
            continue
        rename = next(((new, transpose) for old, new, transpose in _RENAMES if name == old and new in leaves), None)
        found[name] = rename or (name, False)
    return found
