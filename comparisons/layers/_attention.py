"""Which attention bug a divergence between q/k/v projections and the output projection looks like.

When the first divergence lies between an attention's q/k/v projections (which agree) and its output
projection (whose input does not), the difference is in the attention itself. Four bugs are common in a port,
and each leaves its own mark on the output projection's input (batch, positions, features), torch beside Flax:
- the scale (1/d for 1/sqrt(d)): a causal position 0 has one key, so any scale gives it the same weights, and
  it agrees while the last position does not;
- the mask (a causal mask one position off, letting each position see the next): the last position has no
  next, and it agrees while position 0 does not (a middle one may agree too, where the extra key's weight is
  negligible);
- the head split or merge order (split one way, merged the other): every position differs, but position 0,
  which holds its one value vector, holds torch's numbers in another order;
- the softmax axis (normalised over the queries, not the keys): every position differs, and position 0's
  weights no longer sum to one, so its size moves (it shrinks by up to the number of positions).
The measure is where along the positions the two agree, and position 0's numbers and size, nothing else.
"""
from __future__ import annotations

import re

import numpy as np

QKV = re.compile(r"^(q|k|v|qkv|query|key|value|q_proj|k_proj|v_proj|qkv_proj|in_proj|c_attn|to_q|to_k|to_v|wq|wk|wv"
                 r"|query_key_value|Wqkv)$")
OUT = re.compile(r"^(o|out|o_proj|out_proj|output|c_proj|to_out|wo|dense|proj|out_lin)$")
AGREES = 1e-4  # a position agrees when its largest |Δ| is below this fraction of torch's largest |value|
SPREAD = 1.2  # weights that sum to one keep every position's size alike; a softmax over the queries does not
GENERIC = "attention: the scale, the mask, the softmax axis or the head split/merge order"


def between_attention(previous: str | None, current: str) -> bool:
    """Whether `previous` is a q/k/v projection and `current` the output projection of one attention block."""
    if not previous:
        return False
    (block, projection), (out_block, out) = _split(previous), _split(current)
    same_block = out_block == block or out_block.startswith(f"{block}.") if block else True
    return bool(QKV.match(projection) and OUT.match(out) and same_block)


def _split(name: str) -> tuple[str, str]:
    """('blocks.0.attn', 'v_proj') of 'blocks.0.attn.v_proj'; ('', 'v') of 'v'."""
    block, _, last = name.rpartition(".")
    return block, last


def attention_hint(torch_value: np.ndarray | None, flax_value: np.ndarray | None) -> str:
    """The bug the output projection's input points to (module docstring), with the measured facts."""
    if torch_value is None or flax_value is None or torch_value.shape != flax_value.shape or torch_value.ndim < 3:
        return GENERIC
    t = np.asarray(torch_value, np.float64).reshape(torch_value.shape[0], torch_value.shape[1], -1)
    f = np.asarray(flax_value, np.float64).reshape(t.shape)
    scale = float(np.abs(t).max()) or 1.0
    agrees = [bool(np.abs(f[:, p] - t[:, p]).max() <= AGREES * scale) for p in range(t.shape[1])]
    size0 = float(np.linalg.norm(f[:, 0]) / (np.linalg.norm(t[:, 0]) or 1.0))
    where = _where(agrees)
    # Read at the two ends only: a middle position can agree by chance (the mask's one extra key may get a
    # weight below AGREES when its score is far below the others').
    if agrees[0] and not agrees[-1]:
        return f"attention's scale (1/sqrt(d) vs 1/d?): {where}, where one key makes every scale alike"
    if agrees[-1] and not agrees[0]:
        return (f"attention's mask (a causal mask one position off?): {where}, where no later key exists to "
                "let in")
    if not any(agrees) and _same_numbers(t[:, 0], f[:, 0], scale):
        return (f"attention's head split or merge order (reshape to (batch, positions, heads, d), then transpose?): "
                f"{where}, yet position 0 holds torch's numbers in another order")
    sizes = np.linalg.norm(f, axis=(0, 2)) / np.maximum(np.linalg.norm(t, axis=(0, 2)), 1e-300)
    if not any(agrees) and float(sizes.max() / max(sizes.min(), 1e-300)) > SPREAD:
        return (f"attention's softmax axis (over the queries, not the keys?): {where}, and their sizes against "
                f"torch's range from {sizes.min():.2g}x to {sizes.max():.2g}x (position 0: {size0:.2g}x): the "
                "weights no longer sum to one")
    return f"{GENERIC}: {where}"


def _same_numbers(torch_row: np.ndarray, flax_row: np.ndarray, scale: float) -> bool:
    """Whether each batch row of `flax_row` is a reordering of torch's (a permutation of the features)."""
    return bool(np.abs(np.sort(torch_row, axis=-1) - np.sort(flax_row, axis=-1)).max() <= AGREES * scale)


def _where(agrees: list[bool]) -> str:
    if not any(agrees):
        return f"every one of {len(agrees)} positions differs"
    shown = [str(p) for p, ok in enumerate(agrees) if ok]
    if len(shown) == 1:
        return f"position {shown[0]} of {len(agrees)} agrees"
    return f"positions {', '.join(shown)} of {len(agrees)} agree"
