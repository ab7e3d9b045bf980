"""Line torch's calls up with Flax's through the pair's mapping, and judge each row torch against Flax.

A layer called k times gives k rows, its i-th torch call beside its i-th Flax call; a call one side made
and the other did not is a row with a "missing" side. Activations reach Flax's layout by the layer's rule
(`Rule.activations`). Each side is judged as every torch-vs-JAX leaf is: with the float64 forwards, by
`judge_cross` (port or rounding); without, at the rtol and the derived atol.
"""
from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from comparisons.convert import RULES, Layer
from comparisons.judge import Bounds, Sides, compare_trees, judge_cross, larger, measured_rounding
from comparisons.layers._attention import attention_hint
from comparisons.layers._records import Call, Row, Side
from comparisons.verdicts import Leaf

Pairs = list[tuple[int, int, Call | None, Call | None]]  # (layer, call number, torch call, Flax call)


def pair_calls(torch_calls: Sequence[Call], flax_calls: Sequence[Call]) -> Pairs:
    """(layer, call number, torch call, Flax call) in torch's order; Flax's unmatched calls last."""
    by_layer: dict[int, list[Call]] = defaultdict(list)
    for call in flax_calls:
        by_layer[call.layer].append(call)
    seen: dict[int, int] = defaultdict(int)
    pairs: Pairs = []
    for call in torch_calls:
        k = seen[call.layer]
        seen[call.layer] += 1
        twins = by_layer[call.layer]
        pairs.append((call.layer, k, call, twins[k] if k < len(twins) else None))
    pairs += [(layer, k, None, calls[k]) for layer, calls in by_layer.items() for k in range(seen[layer], len(calls))]
    return pairs


def rows(mapping: Sequence[Layer], float32: Sides, float64: Sides | None, tol: Bounds) -> list[Row]:
    """Every row of the view, judged under `tol`: `float32` and `float64` are each side's `Forward`."""
    wide = {} if float64 is None else {(layer, k): Sides(t, f) for layer, k, t, f in
                                       pair_calls(float64.torch.calls, float64.flax.calls)}
    found = []
    for layer_index, k, torch_call, flax_call in pair_calls(float32.torch.calls, float32.flax.calls):
        layer = mapping[layer_index]
        calls64 = wide.get((layer_index, k), Sides(None, None))
        sides = [judge_side(f"{layer.torch}.{name}",
                            Sides(_value(layer, torch_call, name, torch=True), _value(layer, flax_call, name)),
                            Sides(_value(layer, calls64.torch, name, torch=True), _value(layer, calls64.flax, name)),
                            tol=tol, measured=float64 is not None or tol.cause is not None)
                 for name in ("input", "output")]
        found.append(Row(layer.torch, layer.flax, layer.kind, k, *sides))
    return found


def _value(layer: Layer, call: Call | None, name: str, *, torch: bool = False) -> np.ndarray | None:
    value = None if call is None else getattr(call, name)
    if value is None or not torch:
        return value
    return getattr(RULES[layer.kind].activations, name + "s")(value)


def judge_side(path: str, float32: Sides, float64: Sides, *, tol: Bounds, measured: bool) -> Side:
    """One row side, torch against Flax (arrays in Flax's layout) in float32 and, where it ran, float64;
    `measured`: a cause is known (the float64 forwards ran, or the run is float64)."""
    (torch32, flax32), (torch64, flax64) = float32, float64
    if torch32 is None or flax32 is None:
        absent = "torch" if torch32 is None else "Flax"
        return Side(None, None, "missing", message=f"`{path}`: no value on the {absent} side (no call, a call "
                    "without a tensor, or one inside a JAX transform such as nn.scan or nnx.scan, whose steps "
                    "are not recorded: an RNN's row is its whole output)")
    torch32, flax32 = broadcast(torch32, flax32)
    torch64, flax64 = broadcast(_widened(torch64), _widened(flax64))
    side = side_of(judge_trees(path, Sides({path: torch32}, {path: flax32}),
                               None if torch64 is None or flax64 is None
                               else Sides({path: torch64}, {path: flax64}), tol), measured)
    return side if side.agrees else dataclasses.replace(side, attention=attention_hint(torch32, flax32))


def _widened(value: np.ndarray | None) -> np.ndarray | None:
    """A float64 forward's activation as float64: a model that casts its own input (transformers' Flax ViT
    and ResNet take pixels as float32 whatever the weights) records a float32 leaf there, and in that forward
    the dtype says nothing (the float32 forward judges dtypes); its values are what tell rounding from a port."""
    if value is None or not np.issubdtype(value.dtype, np.floating):
        return value
    return np.asarray(value, np.float64)


def broadcast(a: np.ndarray | None, b: np.ndarray | None) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Both sides at their common shape when one holds a size-1 axis the other spells out (GPT-2's position
    ids: torch's (1, T) beside Flax's (B, T)): every row is then compared with the one row; else unchanged."""
    if a is None or b is None or a.shape == b.shape or a.ndim != b.ndim:
        return a, b
    try:
        shape = np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        return a, b  # a real shape mismatch: judged (and failed) as one
    return np.broadcast_to(a, shape), np.broadcast_to(b, shape)


def judge_trees(subject: str, float32: Sides, float64: Sides | None, tol: Bounds) -> list[Leaf]:
    """The leaves of the two sides' trees judged torch against JAX, with a cause when float64 trees are given
    (else `tol.cause`)."""
    labels = Sides(torch="torch", flax="jax")
    if float64 is None:
        return list(compare_trees(subject, "torch vs jax", float32.flax, float32.torch, tol,
                                  sides=(labels.flax, labels.torch)).leaves)
    rounding = larger(measured_rounding(float32.torch, float64.torch), measured_rounding(float32.flax, float64.flax))
    return list(judge_cross(subject, float32, float64, tol, rounding=rounding, labels=labels).leaves)


def side_of(leaves: list[Leaf], measured: bool) -> Side:
    """A Side from judged leaves: the first failing leaf, else the one that differs most."""
    if not leaves:
        return Side(0.0, 0.0, "agree")
    failing = [leaf for leaf in leaves if not leaf.passed]
    leaf = failing[0] if failing else max(leaves, key=lambda x: x.max_abs or 0.0)
    if not leaf.passed:
        verdict = "missing" if leaf.kind in ("missing", "extra") else "differs"
    else:
        verdict = "rounding" if measured and leaf.cause == "rounding" and leaf.max_abs else "agree"
    return Side(leaf.max_abs, leaf.rel, verdict, leaf.cause, leaf.message)
