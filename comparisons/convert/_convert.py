"""Weights between a torch `state_dict` and Flax linen variables, layer by layer, both ways.

A mapping is a list of `Layer(kind, torch_prefix, flax_path)` entries. Each kind has one rule
that turns the layer's torch tensors into its Flax leaves and back; the rules are exact (only
transposes, reshapes and copies), so round trips are bitwise, in float32 and float64.

| kind      | torch (suffix: shape)                          | Flax (path: shape)                          |
|-----------|------------------------------------------------|---------------------------------------------|
| linear    | weight (O, I), bias (O)                        | params kernel (I, O) = weight.T, bias       |
| conv      | weight (O, I, *k), bias (O)   (Conv1d/2d/3d)   | params kernel (*k, I, O), bias              |
| batchnorm | weight, bias, running_mean, running_var        | params scale, bias; batch_stats mean, var   |
| layernorm | weight, bias                                   | params scale, bias                          |
| embedding | weight (V, E)                                  | params embedding (V, E)                     |
| tied_bias | bias (O)      (a layer whose weight is tied)   | params bias                                 |
| mha       | in_proj_weight (3E, E), in_proj_bias (3E),     | params query/key/value kernel (E, H, D),    |
|           | out_proj.weight (E, E), out_proj.bias (E)      | bias (H, D); out kernel (H, D, E), bias (E) |
| lstm      | weight_ih_l0 (4H, I), weight_hh_l0 (4H, H),    | params i{i,f,g,o} kernel (I, H);            |
|           | bias_ih_l0 (4H), bias_hh_l0 (4H)  (gates ifgo) | h{i,f,g,o} kernel (H, H), bias (H)          |
| lstm_fused| the same (nnx.OptimizedLSTMCell's layout)      | params dense_i kernel (I, 4H) = weight_ih.T;|
|           |                                                | dense_h kernel (H, 4H), bias (4H)           |

Not weights, so not here: BatchNorm momentum is torch `m` = Flax `1 - m` (`flax_momentum`), and
torch's `num_batches_tracked` has no Flax counterpart (dropped; kept from `like` on the way back).
LSTM: Flax has one bias per gate, torch two; torch -> Flax sums them, Flax -> torch puts the sum
in `bias_ih_l0` and zeros in `bias_hh_l0` (same function; the torch -> Flax -> torch round trip
keeps `bias_ih + bias_hh`, not the split).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from comparisons.convert._rules import RULES, TORCH_TYPES, Activations, Rule, channels_last, type_name
from comparisons.errors import UsageError, UsageTypeError
from comparisons.placement import canonical_path

__all__ = ["Activations", "ConversionError", "FlaxLeaf", "Layer", "Rule", "channels_last", "flax_grads_to_torch",
           "flax_leaf", "flax_momentum",
           "flax_to_torch", "kind_of", "register_rule", "torch_grads_to_flax", "torch_to_flax"]


_BUILTIN_KINDS = frozenset(RULES)


class ConversionError(UsageError):
    """A mapping does not fit the weights: missing or uncovered parameter, wrong shape, bad kind."""


@dataclass(frozen=True)
class Layer:
    """One mapping entry: torch module prefix ('features.0') <-> Flax path ('Conv_0', 'block/attn').

    `num_heads` is needed for kind 'mha' only (torch packs the heads; Flax splits them).
    """
    kind: str
    torch: str
    flax: str
    num_heads: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in RULES:
            raise ConversionError(
                f"Layer {self.torch!r} -> {self.flax!r}: unsupported layer kind {self.kind!r}; "
                f"supported kinds: {sorted(RULES)}; convert this layer by hand or add one with "
                f"comparisons.convert.register_rule({self.kind!r}, Rule(...))")
        if self.kind == "mha" and not (isinstance(self.num_heads, int) and self.num_heads > 0):
            raise ConversionError(f"Layer mha {self.torch!r}: num_heads={self.num_heads!r}; "
                                  "pass the attention's head count, e.g. Layer('mha', ..., num_heads=4)")


def register_rule(kind: str, rule: Rule, *, torch_types: Sequence[type | str] = (),
                  replace: bool = False) -> Rule:
    """Make `kind` usable in `Layer(kind, ...)`, and the kind of `torch_types` in derived mappings.

    Args:
      kind: the name used in `Layer(kind, ...)`, e.g. 'gpt2_conv1d'.
      rule: the exact conversion both ways (see `Rule`).
      torch_types: torch module classes (or "module.QualName" strings, which import nothing) whose
        instances `comparisons.models.derive_mapping` converts with this rule; subclasses match.
      replace: allow replacing an existing kind or type (never a built-in kind).
    Returns `rule`. Process-wide, like `comparisons.models.register`.
    """
    if not isinstance(rule, Rule):
        raise UsageTypeError(f"register_rule: rule={rule!r} is not a comparisons.convert.Rule; build one with "
                        "Rule(torch_keys, torch_required, buffers, to_flax, to_torch)")
    if not isinstance(kind, str) or not kind:
        raise UsageError(f"register_rule: kind={kind!r}; pass a non-empty name such as 'gpt2_conv1d'")
    if kind in _BUILTIN_KINDS:
        raise UsageError(f"register_rule: kind {kind!r} is built in; pick another name")
    if kind in RULES and not replace:
        raise UsageError(f"register_rule: kind {kind!r} is registered; pick another name or pass replace=True")
    names = [t if isinstance(t, str) else type_name(t) for t in torch_types]
    taken = [n for n in names if n in TORCH_TYPES and TORCH_TYPES[n] != kind and not replace]
    if taken:
        raise UsageError(f"register_rule: torch type {taken[0]!r} already converts as {TORCH_TYPES[taken[0]]!r}; "
                         "pass replace=True to change it")
    RULES[kind] = rule
    TORCH_TYPES.update(dict.fromkeys(names, kind))
    return rule


def kind_of(module: Any) -> str | None:
    """The layer kind a torch module converts as (its class or nearest registered base), or None."""
    for cls in type(module).__mro__:
        kind = TORCH_TYPES.get(type_name(cls))
        if kind is not None:
            return kind
    return None


@dataclass(frozen=True)
class FlaxLeaf:
    """Where a torch parameter lives on the Flax side: its layer's Flax prefix and its own leaf's path."""

    prefix: str
    path: str


def flax_leaf(mapping: Sequence[Layer | tuple], torch_name: str) -> FlaxLeaf | None:
    """The Flax leaf of torch parameter `torch_name` through `mapping`, or None when it has none.

    The owner is the entry with the longest torch prefix of the name (an empty prefix owns every name);
    None where no entry owns it, or its rule has no such torch key (a module the mapping leaves out).
    """
    layers = [layer for layer in _layers(mapping) if _owns(layer.torch, torch_name)]
    if not layers:
        return None
    layer = max(layers, key=lambda entry: len(entry.torch))
    suffix = torch_name[len(layer.torch) + 1:] if layer.torch else torch_name
    rule = RULES[layer.kind]
    if suffix not in rule.torch_keys:
        return None
    prefix, leaf = canonical_path(layer.flax), rule.flax_names.get(suffix, suffix)
    return FlaxLeaf(prefix, f"{prefix}.{leaf}" if prefix else leaf)


def _owns(prefix: str, name: str) -> bool:
    return name == prefix or name.startswith(prefix + ".") if prefix else True


def flax_momentum(torch_momentum: float) -> float:
    """Flax BatchNorm `momentum` equivalent to torch's: torch weighs the new batch by m, Flax the old."""
    return 1.0 - torch_momentum


# ---- drivers ----

def torch_to_flax(state_dict: Mapping[str, Any], mapping: Sequence[Layer | tuple], *,
                  like: Mapping | None = None, strict: bool = True) -> dict:
    """Convert a torch `state_dict` into Flax variables {'params': ..., 'batch_stats': ...}.

    Leaves are fresh C-contiguous numpy arrays (a copy; nothing aliases the torch tensors).
    Args:
      like: Flax variables (or `jax.eval_shape` of `init`) whose tree and shapes must be matched.
      strict: every torch key (but `num_batches_tracked`) must be covered by the mapping.
    """
    return _to_flax("torch_to_flax", state_dict, mapping, like, strict, grads=False)


def flax_to_torch(variables: Mapping, mapping: Sequence[Layer | tuple], *,
                  like: Mapping[str, Any] | None = None, strict: bool = True) -> dict:
    """Convert Flax variables into a torch `state_dict` of fresh CPU tensors (a copy).

    Args:
      like: a torch state_dict whose keys and shapes must be matched; its `num_batches_tracked`
        buffers, which Flax lacks, are copied into the result so `load_state_dict` is strict-safe.
      strict: every Flax leaf must be covered by the mapping.
    """
    flat = _flatten(variables)
    return _to_torch("flax_to_torch", flat, mapping, like, strict, grads=False)


def torch_grads_to_flax(grads: Mapping[str, Any], mapping: Sequence[Layer | tuple]) -> dict:
    """Convert torch parameter gradients {name: grad} into a Flax params-shaped tree (as from jax.grad)."""
    return _to_flax("torch_grads_to_flax", grads, mapping, None, True, grads=True)["params"]


def flax_grads_to_torch(grads: Mapping, mapping: Sequence[Layer | tuple]) -> dict:
    """Convert a Flax params-shaped gradient tree into torch {parameter name: grad tensor}."""
    flat = {("params", *k): v for k, v in _flatten(grads).items()}
    return _to_torch("flax_grads_to_torch", flat, mapping, None, True, grads=True)


def _to_flax(who, tensors, mapping, like, strict, grads):
    from flax.traverse_util import unflatten_dict

    flat = {key: _numpy(who, key, value) for key, value in tensors.items()}
    used, leaves, source = set(), {}, {}
    for layer in _layers(mapping):
        rule = RULES[layer.kind]
        local = _take_torch(who, flat, layer, rule, grads, used)
        convert = rule.grads_to_flax if grads and rule.grads_to_flax else rule.to_flax
        for key, value in convert(local, layer, _checker(who, layer)).items():
            path = (key[0], *_parts(layer.flax), *key[1:])
            leaves[path], source[path] = np.array(value, order="C", copy=True), layer
    uncovered = [k for k in flat if k not in used and not k.endswith("num_batches_tracked")]
    if strict and uncovered:
        raise ConversionError(f"{who}: torch keys {uncovered} are not covered by the mapping; "
                              "add a Layer for their module (or pass strict=False to skip them)")
    if like is not None:
        _match(who, leaves, {k: v.shape for k, v in _flatten(like).items()}, source, "Flax model")
    return unflatten_dict(leaves)


def _to_torch(who, flat, mapping, like, strict, grads):
    import torch

    flat = {key: _numpy(who, ".".join(key), value) for key, value in flat.items()}
    used, tensors, source = set(), {}, {}
    for layer in _layers(mapping):
        rule = RULES[layer.kind]
        local = _take_flax(flat, layer, used)
        convert = rule.grads_to_torch if grads and rule.grads_to_torch else rule.to_torch
        try:
            converted = convert(local, layer, _checker(who, layer))
        except KeyError as missing:
            leaf = ".".join((missing.args[0][0], *_parts(layer.flax), *missing.args[0][1:]))
            raise ConversionError(f"{who}: {_describe(layer)}: missing Flax leaf {leaf!r}; "
                                  "fix the mapping's Flax path or the variables") from None
        for suffix, value in converted.items():
            name = f"{layer.torch}.{suffix}" if layer.torch else suffix
            tensors[name], source[name] = np.array(value, order="C", copy=True), layer
        used.update((k[0], *_parts(layer.flax), *k[1:]) for k in local.read_keys())
    uncovered = [".".join(k) for k in flat if k not in used]
    if strict and uncovered:
        raise ConversionError(f"{who}: Flax leaves {uncovered} are not covered by the mapping; "
                              "add a Layer for their module (or pass strict=False to skip them)")
    if like is not None:
        shapes = {k: tuple(v.shape) for k, v in like.items() if not k.endswith("num_batches_tracked")}
        _match(who, tensors, shapes, source, "torch model")
        tensors.update({k: v for k, v in like.items() if k.endswith("num_batches_tracked")})
    return {k: v if isinstance(v, torch.Tensor) else torch.from_numpy(v) for k, v in tensors.items()}


class _Tracked(dict):
    """A layer's Flax leaves that remembers which ones its rule read (the rest are uncovered)."""

    def __init__(self, *args):
        super().__init__(*args)
        self.read = set()

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self.read.add(key)
        return super().get(key, default)

    def __contains__(self, key):
        self.read.add(key)
        return super().__contains__(key)

    def read_keys(self):
        return [k for k in self.read if dict.__contains__(self, k)]


def _take_torch(who, flat, layer, rule, grads, used):
    prefix = f"{layer.torch}." if layer.torch else ""
    local = {s: flat[prefix + s] for s in rule.torch_keys if prefix + s in flat}
    used.update(prefix + s for s in local)
    missing = [prefix + s for s in rule.torch_required
               if s not in local and not (grads and s in rule.buffers)]
    if missing:
        nearby = sorted(k for k in flat if k.startswith(prefix))
        raise ConversionError(f"{who}: {_describe(layer)}: missing torch key {missing[0]!r} "
                              f"(keys under {layer.torch!r}: {nearby}); fix the mapping's torch prefix")
    return local


def _take_flax(flat, layer, used):
    depth = len(_parts(layer.flax))
    return _Tracked({(k[0], *k[1 + depth:]): v for k, v in flat.items()
                     if _under(k, layer.flax) and k not in used})


def _under(key: tuple, flax_path: str) -> bool:
    parts = _parts(flax_path)
    return key[1:1 + len(parts)] == parts and len(key) > 1 + len(parts)


def _lacking_parameter(name: str, expected: list[str], model: str) -> str | None:
    """Words for a layer the model has, without one of its parameters (the path is right), else None."""
    layer, leaf = name.rsplit(".", 1) if "." in name else ("", name)
    siblings = sorted(k for k in expected if k.startswith(layer + "."))
    if not layer or not siblings:
        return None
    shown = layer.split(".", 1)[-1] if model == "Flax model" else layer
    side = "Flax" if model == "Flax model" else "torch"
    if leaf == "bias":
        fix = "use_bias=False?" if side == "Flax" else "bias=False?"
        return (f"has {siblings} and no {name!r}: the {side} `{shown}` has no bias: {fix} Build both layers "
                "with a bias, or both without")
    return (f"has {siblings} and no {name!r}: the {side} `{shown}` lacks `{leaf}`, a parameter the other side's "
            "layer has")


def _match(who, produced, expected, source, model):
    def show(key):
        return key if isinstance(key, str) else ".".join(key)
    for key in produced:
        name = show(key)
        if key not in expected:
            lacking = _lacking_parameter(name, [show(k) for k in expected], model)
            raise ConversionError(f"{who}: {_describe(source[key])} produced {name!r} but the {model} "
                                  + (lacking or f"has no such entry (it has {sorted(map(show, expected))}); "
                                     "fix the mapping's path"))
        if tuple(produced[key].shape) != tuple(expected[key]):
            raise ConversionError(f"{who}: {name!r} from {_describe(source[key])} has shape "
                                  f"{tuple(produced[key].shape)} but the {model} expects "
                                  f"{tuple(expected[key])}; check the layer kind and sizes")
    missing = [show(k) for k in expected if k not in produced]
    if missing:
        raise ConversionError(f"{who}: the {model} has {missing} that the mapping does not produce; "
                              "add a Layer for them")


def _checker(who, layer):
    def check(ok: bool, name: str, shape, expected: str) -> None:
        if not ok:
            raise ConversionError(f"{who}: {_describe(layer)}: {name} has shape {tuple(shape)}, "
                                  f"expected {expected}")
    return check


def _describe(layer: Layer) -> str:
    return f"{layer.kind} layer torch {layer.torch!r} <-> flax {layer.flax!r}"


def _layers(mapping):
    return [entry if isinstance(entry, Layer) else Layer(*entry) for entry in mapping]


def _parts(flax_path: str) -> tuple[str, ...]:
    """('encoder', 'layer_0') for 'encoder/layer_0' or 'encoder.layer_0': a Layer's Flax path in either spelling."""
    return tuple(p for p in canonical_path(flax_path).split(".") if p)


def _flatten(tree: Mapping) -> dict:
    from flax.traverse_util import flatten_dict
    return flatten_dict(dict(tree))


def _numpy(who, name, value) -> np.ndarray:
    if hasattr(value, "detach"):  # a torch tensor; numpy() shares memory, we copy later
        if str(value.dtype) == "torch.bfloat16":
            raise ConversionError(f"{who}: {name!r} is bfloat16, which numpy lacks; "
                                  "convert in float32 (module.float()) and cast after")
        return value.detach().cpu().numpy()
    return np.asarray(value)
