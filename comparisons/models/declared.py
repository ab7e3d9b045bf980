"""What a pair's declared known differences read from its torch module: the Flax paths of the parameters torch
freezes ('frozen_in_torch'), the rows nn.Embedding(padding_idx) keeps out of the gradient ('padding_row_gradient').
Read where the pair is derived (`derive.pair_from_modules`) and where it is built (`ModelPair.build_declared`)."""
from __future__ import annotations

from typing import Any


def frozen_leaves(torch_module: Any, mapping: Any) -> tuple[str, ...]:
    """The Flax parameter path of each torch parameter with requires_grad=False, through `mapping` (what the
    known difference 'frozen_in_torch' keeps unchanged on the JAX side); a parameter with no Flax leaf is
    left out."""
    from comparisons.convert import flax_leaf

    leaves = (flax_leaf(mapping, name) for name, parameter in torch_module.named_parameters()
              if not parameter.requires_grad)
    return tuple(leaf.path for leaf in leaves if leaf is not None)


def padding_rows(torch_module: Any, mapping: Any) -> tuple[tuple[str, int], ...]:
    """(Flax path of the table, padding row) of each nn.Embedding with a padding_idx, through `mapping`
    (None: torch module names, to tell whether there is any): what the known difference
    'padding_row_gradient' measures on its own (judge/_padding_row.py)."""
    import torch

    from comparisons.convert import flax_leaf

    rows = []
    for name, module in torch_module.named_modules():
        if not isinstance(module, torch.nn.Embedding) or module.padding_idx is None:
            continue
        leaf = None if mapping is None else flax_leaf(mapping, f"{name}.weight")
        if mapping is None or leaf is not None:
            rows.append((name if mapping is None else leaf.path, module.padding_idx))
    return tuple(rows)
