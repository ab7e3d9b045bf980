"""Line torch's calls up with Flax's through the pair's mapping, and judge each row torch against Flax.

A layer called k times gives k rows, its i-th torch call beside its i-th Flax call; a call one side made
and the other did not is a row with a "missing" side. Activations reach Flax's layout by the layer's rule
(`Rule.activations`). Each side is judged as every torch-vs-JAX leaf is: with the float64 forwards, by
`judge_cross` (port or rounding); without, at the rtol and the derived atol.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from comparisons.convert import RULES, Layer
from comparisons.judge import compare_trees, judge_cross, larger, measured_rounding
from comparisons.layers._forward import Forward
from comparisons.layers._records import Bounds, Call, Row, Side
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


def rows(mapping: Sequence[Layer], float32: tuple[Forward, Forward], float64: tuple[Forward, Forward] | None,
         tol: Bounds) -> list[Row]:
    """Every row of the view, judged under `tol`."""
    wide = {} if float64 is None else {(layer, k): (t, f) for layer, k, t, f in
                                       pair_calls(float64[0].calls, float64[1].calls)}
    found = []
    for layer_index, k, torch_call, flax_call in pair_calls(float32[0].calls, float32[1].calls):
        layer = mapping[layer_index]
        t64, f64 = wide.get((layer_index, k), (None, None))
        sides = [judge_side(f"{layer.torch}.{name}", _value(layer, torch_call, name, torch=True),
                            _value(layer, flax_call, name), _value(layer, t64, name, torch=True),
                            _value(layer, f64, name), tol=tol, measured=float64 is not None or tol.cause is not None)
                 for name in ("input", "output")]
        found.append(Row(layer.torch, layer.flax, layer.kind, k, *sides))
    return found


def _value(layer: Layer, call: Call | None, name: str, *, torch: bool = False) -> np.ndarray | None:
    value = None if call is None else getattr(call, name)
    if value is None or not torch:
        return value
    return getattr(RULES[layer.kind].activations, name + "s")(value)


def judge_side(path: str, torch32, flax32, torch64, flax64, *, tol: Bounds, measured: bool) -> Side:
    """One row side, torch against Flax (arrays in Flax's layout); `measured`: a cause is known (the float64
    forwards ran, or the run is float64)."""
    if torch32 is None or flax32 is None:
        absent = "torch" if torch32 is None else "Flax"
        return Side(None, None, "missing", message=f"`{path}`: no value on the {absent} side (no call, a call "
                    "without a tensor, or one inside a JAX transform such as nn.scan)")
    torch32, flax32 = broadcast(torch32, flax32)
    torch64, flax64 = broadcast(_widened(torch64), _widened(flax64))
    return side_of(judge_trees(path, ({path: flax32}, {path: torch32}),
                               None if torch64 is None or flax64 is None
                               else ({path: flax64}, {path: torch64}), tol), measured)


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


def judge_trees(subject: str, float32: tuple[Any, Any], float64: tuple[Any, Any] | None,
                tol: Bounds) -> list[Leaf]:
    """The leaves of (Flax, torch) trees judged torch against JAX, with a cause when float64 trees are given
    (else `tol.cause`)."""
    rtol, atol, cause = tol
    sides = ("jax", "torch")
    if float64 is None:
        return list(compare_trees(subject, "torch vs jax", *float32, rtol, atol=atol, sides=sides,
                                  cause=cause).leaves)
    rounding = larger(measured_rounding(float32[1], float64[1]), measured_rounding(float32[0], float64[0]))
    return list(judge_cross(subject, "torch vs jax", float32, float64, rtol, atol=atol, rounding=rounding,
                            sides=sides).leaves)


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
