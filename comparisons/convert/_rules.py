"""The per-kind rules behind `_convert.py`: exact torch <-> Flax weight transforms, one per layer kind.

A rule sees one layer: torch tensors keyed by suffix ('weight', 'out_proj.bias'), Flax leaves keyed
by (collection, *subpath). Each function receives `check(ok, name, shape, expected)`, which raises
a `ConversionError` naming the layer.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np


def _same(x: np.ndarray) -> np.ndarray:
    return x


def channels_last(x: np.ndarray) -> np.ndarray:
    """torch's (N, C, *spatial) activation in Flax's (N, *spatial, C); a 2-D (N, C) one is unchanged."""
    return np.moveaxis(x, 1, -1) if x.ndim >= 3 else x


def channels_last_inputs(inputs: tuple) -> tuple:
    """A pair's torch-layout inputs (NCHW images) in Flax's layout (NHWC), each by `channels_last`: the
    `to_flax_inputs` of an image pair. Costs a transposed view of each input, no copy."""
    return tuple(channels_last(np.asarray(x)) for x in inputs)


@dataclass(frozen=True)
class Activations:
    """How one layer kind's activations line up, torch -> Flax, for the per-layer view.

    Attributes:
      inputs / outputs: a torch-layout activation (the layer's first tensor input / its first tensor output)
        -> the Flax layout; conv and BatchNorm move channels last, the rest keep the layout.
      flax_module: which Flax module's call is the torch module's: "" the mapped path itself, ".." its
        parent (an LSTM: Flax maps the weights to the cell, called once per step inside `nn.RNN`, while
        torch's `nn.LSTM` is the whole recurrence).
    Tuples are read at their first tensor on both sides (an LSTM's (states, (h, c)), an MHA's (out, weights)).
    """
    inputs: Callable[[np.ndarray], np.ndarray] = _same
    outputs: Callable[[np.ndarray], np.ndarray] = _same
    flax_module: str = ""


@dataclass(frozen=True)
class Rule:
    """How one layer kind converts: the torch suffixes it reads, and the functions each way.

    Attributes:
      torch_keys: every torch suffix the rule may read ('weight', 'bias', 'out_proj.weight').
      torch_required: the suffixes that must be present.
      buffers: suffixes that are buffers (absent from gradients).
      to_flax: (tensors, layer, check) -> {(collection, *subpath): array}; `tensors` maps suffix
        -> numpy array, `check(ok, name, shape, expected)` raises a ConversionError naming the layer.
      to_torch: (leaves, layer, check) -> {suffix: array}, the inverse.
      grads_to_flax / grads_to_torch: for gradients, when they convert unlike the weights.
      activations: how the layer's inputs and outputs line up, torch -> Flax (comparisons.layers reads it):
        the activation layout beside the weight layout, so a registered rule brings its own.
      flax_names: torch suffix -> the Flax leaf (dotted, under the layer) it becomes one to one,
        e.g. {'weight': 'kernel'}; how a report lines a torch tensor up with its Flax twin. A suffix
        with no single Flax leaf (an MHA's packed in_proj) is left out; a suffix not listed lines up
        with the Flax leaf of the same name.
    Every function must be exact (transposes, reshapes, copies): round trips are checked bitwise.
    """
    torch_keys: tuple[str, ...]
    torch_required: tuple[str, ...]
    buffers: tuple[str, ...]
    to_flax: Callable[..., dict]
    to_torch: Callable[..., dict]
    grads_to_flax: Callable[..., dict] | None = None
    grads_to_torch: Callable[..., dict] | None = None
    flax_names: Mapping[str, str] = field(default_factory=dict)
    activations: Activations = Activations()


def _dense_to_flax(t, layer, check):
    w = t["weight"]
    check(w.ndim == 2, "weight", w.shape, "a 2-D (out, in) matrix")
    return _with_bias({("params", "kernel"): w.T}, ("params", "bias"), t.get("bias"), w.shape[0], check)


def _dense_to_torch(f, layer, check):
    k = f[("params", "kernel")]
    check(k.ndim == 2, "kernel", k.shape, "a 2-D (in, out) matrix")
    return _with_bias({"weight": k.T}, "bias", f.get(("params", "bias")), k.shape[1], check)


def _conv_to_flax(t, layer, check):
    w = t["weight"]
    check(w.ndim >= 3, "weight", w.shape, "(out, in, *kernel) as in Conv1d/2d/3d")
    kernel = w.transpose(*range(2, w.ndim), 1, 0)
    return _with_bias({("params", "kernel"): kernel}, ("params", "bias"), t.get("bias"), w.shape[0], check)


def _conv_to_torch(f, layer, check):
    k = f[("params", "kernel")]
    check(k.ndim >= 3, "kernel", k.shape, "(*kernel, in, out) as in flax.linen.Conv")
    w = k.transpose(k.ndim - 1, k.ndim - 2, *range(k.ndim - 2))
    return _with_bias({"weight": w}, "bias", f.get(("params", "bias")), k.shape[-1], check)


def _with_bias(out: dict, key, bias, size: int, check) -> dict:
    if bias is not None:
        check(bias.shape == (size,), "bias", bias.shape, f"({size},) to match the weight")
        out[key] = bias
    return out


_NORM_PAIRS = (("weight", ("params", "scale")), ("bias", ("params", "bias")))
_BN_STATS = (("running_mean", ("batch_stats", "mean")), ("running_var", ("batch_stats", "var")))


def _renamer(pairs):
    def to_flax(t, layer, check):
        return {f: t[s] for s, f in pairs if s in t}

    def to_torch(f, layer, check):
        return {s: f[k] for s, k in pairs if k in f}
    return to_flax, to_torch


def _mha_to_flax(t, layer, check):
    w, heads = t["in_proj_weight"], layer.num_heads
    e = w.shape[1]
    check(w.shape == (3 * e, e), "in_proj_weight", w.shape, f"(3*E, E) = {(3 * e, e)}")
    check(e % heads == 0, "in_proj_weight", w.shape, f"E={e} divisible by num_heads={heads}")
    shape, out = (e, heads, e // heads), {}
    for i, name in enumerate(("query", "key", "value")):
        out[("params", name, "kernel")] = w[i * e:(i + 1) * e].T.reshape(shape)
        if "in_proj_bias" in t:
            out[("params", name, "bias")] = t["in_proj_bias"][i * e:(i + 1) * e].reshape(shape[1:])
    ow = t["out_proj.weight"]
    check(ow.shape == (e, e), "out_proj.weight", ow.shape, f"(E, E) = {(e, e)}")
    out[("params", "out", "kernel")] = ow.T.reshape(heads, e // heads, e)
    if "out_proj.bias" in t:
        out[("params", "out", "bias")] = t["out_proj.bias"]
    return out


def _mha_to_torch(f, layer, check):
    q = f[("params", "query", "kernel")]
    check(q.ndim == 3 and q.shape[0] == q.shape[1] * q.shape[2], "query/kernel", q.shape,
          "(E, heads, E // heads): torch packs q/k/v only when qkv_features == embed dim")
    e, out = q.shape[0], {}
    kernels = [f[("params", n, "kernel")] for n in ("query", "key", "value")]
    for name, k in zip(("key", "value"), kernels[1:]):
        check(k.shape == q.shape, f"{name}/kernel", k.shape, f"{q.shape} like query/kernel")
    out["in_proj_weight"] = np.concatenate([k.reshape(e, e).T for k in kernels])
    if ("params", "query", "bias") in f:
        out["in_proj_bias"] = np.concatenate(
            [f[("params", n, "bias")].reshape(e) for n in ("query", "key", "value")])
    o = f[("params", "out", "kernel")]
    check(o.shape == q.shape[1:] + (e,), "out/kernel", o.shape, f"{q.shape[1:] + (e,)}")
    out["out_proj.weight"] = o.reshape(e, e).T
    if ("params", "out", "bias") in f:
        out["out_proj.bias"] = f[("params", "out", "bias")]
    return out


_GATES = "ifgo"  # torch's row-block order in the packed LSTM weights; Flax names gates by letter


def _lstm_to_flax(t, layer, check, grads=False):
    w_ih, w_hh = t["weight_ih_l0"], t["weight_hh_l0"]
    h = w_hh.shape[1]
    check(w_hh.shape == (4 * h, h), "weight_hh_l0", w_hh.shape, f"(4*H, H) = {(4 * h, h)}")
    check(w_ih.ndim == 2 and w_ih.shape[0] == 4 * h, "weight_ih_l0", w_ih.shape, f"(4*H, input) with H={h}")
    # grads: both torch biases get d(loss)/d(sum), so the sum's gradient is either one of them
    bias = t["bias_ih_l0"] if grads else t["bias_ih_l0"] + t["bias_hh_l0"]
    out = {}
    for g, gate in enumerate(_GATES):
        rows = slice(g * h, (g + 1) * h)
        out[("params", "i" + gate, "kernel")] = w_ih[rows].T
        out[("params", "h" + gate, "kernel")] = w_hh[rows].T
        out[("params", "h" + gate, "bias")] = bias[rows]
    return out


def _lstm_to_torch(f, layer, check, grads=False):
    def stack(prefix, leaf):
        return np.concatenate([f[("params", prefix + gate, leaf)].T for gate in _GATES])
    bias = np.concatenate([f[("params", "h" + gate, "bias")] for gate in _GATES])
    return {"weight_ih_l0": stack("i", "kernel"), "weight_hh_l0": stack("h", "kernel"),
            "bias_ih_l0": bias, "bias_hh_l0": bias if grads else np.zeros_like(bias)}


def _fused_lstm_to_flax(t, layer, check, grads=False):
    """torch's packed LSTM weights as nnx.OptimizedLSTMCell's: its `dense_i` and `dense_h` Linears hold all four
    gates side by side in torch's order (i, f, g, o), so each kernel is the torch weight transposed."""
    w_ih, w_hh = t["weight_ih_l0"], t["weight_hh_l0"]
    h = w_hh.shape[1]
    check(w_hh.shape == (4 * h, h), "weight_hh_l0", w_hh.shape, f"(4*H, H) = {(4 * h, h)}")
    check(w_ih.ndim == 2 and w_ih.shape[0] == 4 * h, "weight_ih_l0", w_ih.shape, f"(4*H, input) with H={h}")
    bias = t["bias_ih_l0"] if grads else t["bias_ih_l0"] + t["bias_hh_l0"]  # as `_lstm_to_flax`'s
    return {("params", "dense_i", "kernel"): w_ih.T, ("params", "dense_h", "kernel"): w_hh.T,
            ("params", "dense_h", "bias"): bias}


def _fused_lstm_to_torch(f, layer, check, grads=False):
    k_i, k_h, bias = (f[("params", *leaf)] for leaf in (("dense_i", "kernel"), ("dense_h", "kernel"),
                                                           ("dense_h", "bias")))
    check(k_h.ndim == 2 and k_h.shape[1] == 4 * k_h.shape[0], "dense_h/kernel", k_h.shape, "(H, 4*H)")
    check(k_i.ndim == 2 and k_i.shape[1] == k_h.shape[1], "dense_i/kernel", k_i.shape, f"(input, {k_h.shape[1]})")
    return {"weight_ih_l0": k_i.T, "weight_hh_l0": k_h.T,
            "bias_ih_l0": bias, "bias_hh_l0": bias if grads else np.zeros_like(bias)}


_LSTM_KEYS = ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")


def _lstm_rule(to_flax: Callable[..., dict], to_torch: Callable[..., dict], **extra: Any) -> Rule:
    """An LSTM rule: every torch key required, the gradient forms the same functions with grads=True, and its
    activations those of the cell's parent (the RNN, the whole recurrence torch's nn.LSTM is)."""
    return Rule(_LSTM_KEYS, _LSTM_KEYS, (), to_flax, to_torch,
                lambda tensors, layer, check: to_flax(tensors, layer, check, grads=True),
                lambda leaves, layer, check: to_torch(leaves, layer, check, grads=True),
                activations=Activations(flax_module=".."), **extra)


RULES: dict[str, Rule] = {
    "linear": Rule(("weight", "bias"), ("weight",), (), _dense_to_flax, _dense_to_torch,
                   flax_names={"weight": "kernel"}),
    "conv": Rule(("weight", "bias"), ("weight",), (), _conv_to_flax, _conv_to_torch, flax_names={"weight": "kernel"},
                 activations=Activations(channels_last, channels_last)),
    "batchnorm": Rule(("weight", "bias", "running_mean", "running_var", "num_batches_tracked"),
                       ("running_mean", "running_var"), ("running_mean", "running_var"),
                       *_renamer(_NORM_PAIRS + _BN_STATS),
                       flax_names={"weight": "scale", "running_mean": "mean", "running_var": "var"},
                       activations=Activations(channels_last, channels_last)),
    "layernorm": Rule(("weight", "bias"), (), (), *_renamer(_NORM_PAIRS), flax_names={"weight": "scale"}),
    # torch.nn.RMSNorm: Flax's nn.RMSNorm holds the same weight as "scale" (set eps= alike: torch's default
    # is its dtype's machine epsilon, Flax's 1e-6)
    "rmsnorm": Rule(("weight",), (), (), *_renamer((("weight", ("params", "scale")),)), flax_names={"weight": "scale"}),
    "embedding": Rule(("weight",), ("weight",), (), *_renamer((("weight", ("params", "embedding")),)),
                      flax_names={"weight": "embedding"}),
    # a Linear/Conv whose weight is tied to another module's (an LM head on the input embedding):
    # the layer owns only its bias; the tied weight converts once, where it is canonical
    "tied_bias": Rule(("bias",), ("bias",), (), *_renamer((("bias", ("params", "bias")),))),
    "mha": Rule(("in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"),
                 ("in_proj_weight", "out_proj.weight"), (), _mha_to_flax, _mha_to_torch,
                 flax_names={"out_proj.weight": "out.kernel", "out_proj.bias": "out.bias"}),
    "lstm": _lstm_rule(_lstm_to_flax, _lstm_to_torch),
    # torch.nn.LSTM as nnx.OptimizedLSTMCell holds it, gates fused in torch's order (derive_mapping picks it
    # when the cell has `dense_i`); linen's OptimizedLSTMCell keeps per-gate kernels and converts as "lstm"
    "lstm_fused": _lstm_rule(_fused_lstm_to_flax, _fused_lstm_to_torch,
                             flax_names={"weight_ih_l0": "dense_i.kernel", "weight_hh_l0": "dense_h.kernel"}),
}


# torch module type -> kind, for mappings derived from a module tree (comparisons.models.derive).
# Keyed by "module.QualName" so that nothing here imports torch; subclasses match through the MRO.
TORCH_TYPES: dict[str, str] = {
    **{f"torch.nn.modules.linear.{name}": "linear" for name in ("Linear",)},
    **{f"torch.nn.modules.conv.Conv{d}d": "conv" for d in (1, 2, 3)},
    **{f"torch.nn.modules.batchnorm.BatchNorm{d}d": "batchnorm" for d in (1, 2, 3)},
    "torch.nn.modules.normalization.LayerNorm": "layernorm",
    "torch.nn.modules.normalization.RMSNorm": "rmsnorm",
    "torch.nn.modules.sparse.Embedding": "embedding",
    "torch.nn.modules.activation.MultiheadAttention": "mha",
    "torch.nn.modules.rnn.LSTM": "lstm",
}


def type_name(cls: type) -> str:
    """The "module.QualName" key of a class in TORCH_TYPES."""
    return f"{cls.__module__}.{cls.__qualname__}"
