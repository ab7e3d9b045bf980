"""The benchmarked models: the same MLP in Flax linen and in torch, sized by width.

Input features equal the width, so FLOPs grow as width**2 and size sweeps stay readable.
"""
from __future__ import annotations

from typing import Any

import numpy as np

DEPTH = 3  # hidden Dense/Linear layers before the 10-way head
CLASSES = 10


def flax_mlp(width: int) -> Any:
    """A linen MLP: DEPTH x (Dense(width), relu), then Dense(CLASSES)."""
    import flax.linen as nn

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            for _ in range(DEPTH):
                x = nn.relu(nn.Dense(width)(x))
            return nn.Dense(CLASSES)(x)

    return MLP()


def torch_mlp(width: int) -> Any:
    """The torch twin of `flax_mlp` (float32, on cpu)."""
    import torch.nn as nn

    layers: list[nn.Module] = []
    for _ in range(DEPTH):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, CLASSES))


def batch(batch_size: int, width: int, seed: int = 0) -> np.ndarray:
    """A float32 input batch of shape (batch_size, width)."""
    return np.random.default_rng(seed).standard_normal((batch_size, width), dtype=np.float32)


def torch_model_and_batch(width: int, batch_size: int, device: Any) -> tuple[Any, Any]:
    """(torch MLP on `device`, input batch on `device`), seeded."""
    import torch

    torch.manual_seed(0)
    return torch_mlp(width).to(device), torch.from_numpy(batch(batch_size, width)).to(device)


def flax_model_and_batch(width: int, batch_size: int, device: Any) -> tuple[Any, Any, Any]:
    """(linen MLP, its variables, input batch), arrays committed to `device` (torch's device_ids[0])."""
    import jax

    model = flax_mlp(width)
    x = jax.device_put(batch(batch_size, width), device)
    return model, jax.device_put(model.init(jax.random.key(0), x), device), x


def param_count(width: int) -> int:
    return DEPTH * (width * width + width) + width * CLASSES + CLASSES
