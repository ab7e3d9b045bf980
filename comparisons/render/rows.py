"""Rows of the side-by-side placement picture: each torch tensor beside its Flax counterpart.

`conv1.weight` sits beside `params.conv1.kernel`, `bn1.running_mean` beside `batch_stats.bn1.mean`,
`args.0` beside `args.0`. Flax tensors with no single torch counterpart (an MHA's query/key/value
kernels, an LSTM's per-gate kernels) follow the last row of their layer; the rest come last.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from comparisons.convert import RULES
from comparisons.judge import layer_of
from comparisons.placement import PlacementMap

Key = tuple[str, str]  # (role, path)
Row = tuple[Key | None, Key | None]  # (torch tensor, Flax tensor)



def aligned_rows(torch_map: PlacementMap, jax_maps: Iterable[PlacementMap],
                 layers: Mapping[str, str]) -> list[Row]:
    """(torch key, Flax key) rows in torch's order; `layers` maps torch layer -> Flax layer path."""
    flax_keys = list(dict.fromkeys((r.role, r.path) for m in jax_maps for r in m))
    free = dict.fromkeys(flax_keys)
    rows: list[Row] = []
    for key in dict.fromkeys((r.role, r.path) for r in torch_map):
        match = next((c for c in _counterparts(key, layers) if c in free), None)
        free.pop(match, None)
        rows.append((key, match))
    for key in free:  # leftovers: after the last row of the same role and Flax layer, else at the end
        layer = _flax_layer(key[1], layers.values())
        same = [i for i, (_, f) in enumerate(rows)
                if layer and f and f[0] == key[0] and _flax_layer(f[1], layers.values()) == layer]
        rows.insert(same[-1] + 1 if same else len(rows), (None, key))
    return rows


def _counterparts(key: Key, layers: Mapping[str, str]) -> list[Key]:
    role, path = key
    layer = layer_of(path, layers)
    if role not in ("param", "buffer", "grad") or layer in (None, path):
        return [key]
    collection = "batch_stats" if role == "buffer" else "params"
    rest = path[len(layer) + 1:]
    return [(role, f"{collection}.{layers[layer]}.{name}") for name in flax_names(rest)]


def flax_names(suffix: str) -> list[str]:
    """The Flax leaves a torch suffix may become, as every registered rule declares (`Rule.flax_names`),
    then the same name; a user's `register_rule` counts as a built-in one."""
    declared = [rule.flax_names[suffix] for rule in RULES.values() if suffix in rule.flax_names]
    return list(dict.fromkeys([*declared, suffix]))


def _flax_layer(path: str, flax_layers: Iterable[str]) -> str | None:
    return layer_of(path.split(".", 1)[-1], flax_layers)  # without the collection
