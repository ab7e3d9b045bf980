"""What a pair's declared known differences read from its torch module: the Flax paths of the parameters torch
freezes ('frozen_in_torch'), the rows nn.Embedding(padding_idx) keeps out of the gradient ('padding_row_gradient').
Read where the pair is derived (`derive.pair_from_modules`) and where it is built (`ModelPair.build_declared`)."""
from __future__ import annotations

from typing import Any


def frozen_leaves(torch_module: Any, mapping: Any) -> tuple[str, ...]:
    """The Flax parameter path of each torch parameter with requires_grad=False, through `mapping` (what the
    known difference 'frozen_in_torch' keeps unchanged on the JAX side); a parameter with no Flax leaf is
    left out."""
    from comparisons.convert import RULES
    from comparisons.placement import canonical_path

    found = []
    for name, parameter in torch_module.named_parameters():
        owners = [layer for layer in mapping if name.startswith(f"{layer.torch}.") or not layer.torch]
        if parameter.requires_grad or not owners:
            continue
        layer = max(owners, key=lambda entry: len(entry.torch))
        suffix = name[len(layer.torch) + 1:] if layer.torch else name
        prefix = canonical_path(layer.flax)
        leaf = RULES[layer.kind].flax_names.get(suffix, suffix)
        found.append(f"{prefix}.{leaf}" if prefix else leaf)
    return tuple(found)


def padding_rows(torch_module: Any, mapping: Any) -> tuple[tuple[str, int], ...]:
    """(Flax path of the table, padding row) of each nn.Embedding with a padding_idx, through `mapping`
    (None: torch module names, to tell whether there is any): what the known difference
    'padding_row_gradient' measures on its own (judge/_padding_row.py)."""
    import torch

    from comparisons.convert import RULES
    from comparisons.placement import canonical_path

    rows = []
    for name, module in torch_module.named_modules():
        if not isinstance(module, torch.nn.Embedding) or module.padding_idx is None:
            continue
        if mapping is None:
            rows.append((name, module.padding_idx))
            continue
        layer = next((entry for entry in mapping if entry.torch == name), None)
        if layer is not None:
            leaf = RULES[layer.kind].flax_names.get("weight", "weight")
            rows.append((f"{canonical_path(layer.flax)}.{leaf}", module.padding_idx))
    return tuple(rows)
