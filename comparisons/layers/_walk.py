"""The first divergence: walking the rows in torch's order, the first place torch and Flax part.

- inside a layer: its input agrees and its output does not;
- between two layers: the previous layer's output agrees and the next one's input does not (the
  difference is in unmapped code: an activation, a reshape, a residual); "(output)" is the model's output,
  after the last mapped layer;
- a row where one side has no value (a call the other side never made: a reused result, a layer under
  nn.remat) is skipped: it parts nowhere, and the report notes it;
- when the forward agrees everywhere: the first parameter whose gradient differs, in backward order
  ("gradient"), else the first statistic that differs, in forward order ("statistic"), read from the
  comparison's own torch-vs-JAX checks.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from comparisons.convert import RULES, Layer
from comparisons.layers._attention import between_attention
from comparisons.layers._records import Row, Side
from comparisons.placement import canonical_path
from comparisons.verdicts import Check

OUTPUT = "(output)"

# What to compare first when a layer of this kind is where the two sides part.
HINTS = {
    "layernorm": "compare epsilon (torch LayerNorm 1e-5, RMSNorm its dtype's eps; Flax's, linen and NNX, 1e-6)",
    "rmsnorm": "compare epsilon (torch RMSNorm's default is its dtype's eps; Flax's, linen and NNX, 1e-6)",
    "batchnorm": ("compare epsilon and momentum (torch m is Flax 1 - m: Flax's default 0.99 is torch's 0.01) and "
                  "which variance is tracked"),
    "conv": "compare padding (amounts and mode: zeros, circular, reflect), strides, dilation and groups",
    "linear": "compare use_bias and the kernel's transpose",
    "mha": "compare num_heads, the mask, the scaling and the packed q/k/v split",
    "embedding": "compare the vocabulary rows and padding_idx",
    "lstm": "compare the gate order (torch i, f, g, o) and the two torch biases (Flax has one)",
}
BETWEEN_HINT = ("an activation (GELU exact vs tanh?), a reshape or transpose, a residual or a scaling in the "
                "code between these layers")


def first_divergence(rows: Sequence[Row], output: Side, mapping: Sequence[Layer], checks: Sequence[Check]
                     ) -> dict[str, Any] | None:
    """The `first_divergence` record (docs/report_schema.md#layer-view), or None when nothing parts."""
    previous = None
    for row in (row for row in rows if row.has_values):  # a call one side never made is a note, not a divergence
        if not row.input.agrees:
            hint = row.input.attention if between_attention(previous, row.torch) and row.input.attention \
                else BETWEEN_HINT
            return _record("between", row, previous, row.input, f"`{previous or 'the model input'}` agrees but "
                           f"`{row.torch}`'s input {_differs(row.input)}: {hint}")
        if not row.output.agrees:
            hint = HINTS.get(row.kind, "compare its settings")
            return _record("inside", row, previous, row.output, f"`{row.torch}` ({row.kind}): input agrees to "
                           f"{_figure(row.input)}, output {_differs(row.output)}: {hint}")
        previous = row.torch
    if not output.agrees:
        return {"where": "between", "torch": OUTPUT, "flax": OUTPUT, "previous": previous, "cause": output.cause,
                "kind": "output", "message": f"every layer agrees but the model output {_differs(output)}: the code "
                f"after `{previous}` (post-processing, an output activation) differs"}
    order = list(dict.fromkeys(row.torch for row in rows))
    return (_parameter(checks, "gradients", mapping, order[::-1]) or
            _parameter(checks, "batch_stats", mapping, order))


def _record(where: str, row: Row, previous: str | None, side: Side, message: str) -> dict[str, Any]:
    return {"where": where, "torch": row.torch, "flax": canonical_path(row.flax), "previous": previous,
            "cause": side.cause, "kind": row.kind, "call": row.call, "message": message}


def _figure(side: Side) -> str:
    return "0" if not side.max_abs else f"{side.max_abs:.1e}"


def _differs(side: Side) -> str:
    if side.verdict == "missing" or side.max_abs is None:
        return f"{'is missing' if side.verdict == 'missing' else 'differs'} ({side.message})"
    return f"differs by {_figure(side)}" + (f" ({side.cause})" if side.cause else "")


def _parameter(checks: Sequence[Check], subject: str, mapping: Sequence[Layer], order: list[str]
               ) -> dict[str, Any] | None:
    """The first failing leaf of the first failing torch-vs-JAX `subject` check, layers taken in `order`."""
    check = next((c for c in checks if c.subject == subject and c.compared.startswith("torch DP vs jax")
                  and not c.passed), None)
    if check is None:
        return None
    rank = {name: i for i, name in enumerate(order)}
    placed = sorted((rank.get(layer.torch, len(rank)) if layer else len(rank), i, leaf, layer)
                    for i, (leaf, layer) in enumerate((leaf, _layer_of(leaf.path, mapping)) for leaf in check.leaves))
    previous = None
    for _, _, leaf, layer in placed:
        name = _torch_name(leaf.path, layer)
        if leaf.passed:
            previous = name
            continue
        what = "gradient" if subject == "gradients" else "statistic"
        return {"where": what, "torch": name, "flax": leaf.path, "previous": previous, "cause": leaf.cause,
                "kind": layer.kind if layer else None, "message": f"the forward agrees at every layer, but the "
                f"{what} of `{name}` (Flax `{leaf.path}`) differs: {leaf.message}"}
    return None


def _layer_of(path: str, mapping: Sequence[Layer]) -> Layer | None:
    matches = [layer for layer in mapping if path.startswith(canonical_path(layer.flax) + ".")]
    return max(matches, key=lambda layer: len(layer.flax), default=None)


def _torch_name(path: str, layer: Layer | None) -> str:
    """A Flax leaf path as the torch tensor it mirrors ('mid.kernel' -> 'mid.weight'), where the rule says."""
    if layer is None:
        return path
    rest = path[len(canonical_path(layer.flax)) + 1:]
    torch_suffix = {flax: torch for torch, flax in RULES[layer.kind].flax_names.items()}.get(rest, rest)
    return f"{layer.torch}.{torch_suffix}"
