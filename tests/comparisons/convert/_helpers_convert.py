"""Single layers in both frameworks with random weights, for conversion tests."""
from __future__ import annotations

import numpy as np
import torch
from flax import linen as nn

from comparisons.convert import Layer


def randomize(module: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Overwrite every float tensor of the state (params and running stats) with random values."""
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for name, tensor in module.state_dict().items():
            if tensor.is_floating_point():
                values = rng.standard_normal(tuple(tensor.shape))
                tensor.copy_(torch.from_numpy(np.abs(values) if "running_var" in name else values))
    return module


def layer_case(kind: str, seed: int):
    """(torch layer, flax layer, Layer entry, torch-layout input maker) with sizes drawn from `seed`.

    The torch layer sits at prefix 'blk' of a ModuleDict, the flax layer at 'outer/blk'.
    """
    rng = np.random.default_rng(seed)
    a, b, k = (int(v) for v in rng.integers(2, 6, 3))
    bias = bool(seed % 2)
    if kind == "linear":
        pair = torch.nn.Linear(a, b, bias=bias), nn.Dense(b, use_bias=bias), (4, a)
    elif kind == "conv1d":
        pair = torch.nn.Conv1d(a, b, k, bias=bias), nn.Conv(b, (k,), padding="VALID", use_bias=bias), (3, a, 7)
    elif kind == "conv2d":
        pair = (torch.nn.Conv2d(a, b, (k, 2), padding=1), nn.Conv(b, (k, 2), padding=1), (2, a, 6, 5))
    elif kind == "batchnorm":
        pair = torch.nn.BatchNorm1d(a), nn.BatchNorm(use_running_average=True, epsilon=1e-5), (5, a)
    elif kind == "layernorm":
        pair = torch.nn.LayerNorm(a), nn.LayerNorm(epsilon=1e-5), (3, 2, a)
    elif kind == "embedding":
        pair = torch.nn.Embedding(a + 3, b), nn.Embed(a + 3, b), None
    elif kind == "mha":
        heads, dim = a, a * b
        pair = (torch.nn.MultiheadAttention(dim, heads, bias=bias, batch_first=True),
                nn.MultiHeadDotProductAttention(num_heads=heads, use_bias=bias), (2, k, dim))
    elif kind == "lstm":
        pair = torch.nn.LSTM(a, b, batch_first=True), nn.RNN(nn.OptimizedLSTMCell(b)), (2, k, a)
    else:
        raise ValueError(kind)
    torch_layer, flax_layer, shape = pair
    base = {"conv1d": "conv", "conv2d": "conv"}.get(kind, kind)
    flax_path = "outer/blk/cell" if kind == "lstm" else "outer/blk"
    entry = Layer(base, "blk", flax_path, num_heads=a if kind == "mha" else None)
    randomize(torch_layer, seed)
    return torch.nn.ModuleDict({"blk": torch_layer}), flax_layer, entry, shape


def torch_layout_to_flax(kind: str, x: np.ndarray) -> np.ndarray:
    """Channels first (torch convs) -> channels last (flax convs); other inputs are shared as is."""
    return np.moveaxis(x, 1, -1) if kind.startswith("conv") else x
