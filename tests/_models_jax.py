"""Small Flax models for the dp_jax strategy tests: MLP, conv net with BatchNorm, attention block, LSTM.

Each model takes (x, train) and returns per-row outputs; `make(name, batch, seed)` gives the model,
its variables and an input batch of fresh random data.
"""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool = False):
        x = nn.relu(nn.Dense(32)(x))
        x = nn.Dropout(0.3, deterministic=not train)(x)
        return nn.Dense(4)(x)


class ConvBN(nn.Module):
    """NHWC conv -> BatchNorm -> relu -> pool -> dense; BN uses batch statistics when train."""

    axis_name: str | None = None

    @nn.compact
    def __call__(self, x, train: bool = False):
        x = nn.Conv(8, (3, 3))(x)
        x = nn.BatchNorm(use_running_average=not train, momentum=0.9, axis_name=self.axis_name)(x)
        x = nn.relu(x).mean(axis=(1, 2))
        return nn.Dense(3)(x)


class Attention(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool = False):
        y = nn.MultiHeadDotProductAttention(num_heads=2, qkv_features=8, dropout_rate=0.2)(
            x, deterministic=not train
        )
        return nn.LayerNorm()(x + y)


class LSTM(nn.Module):
    """nn.RNN(nn.LSTMCell): a lax.scan whose zero initial carry meets the (per-replica) inputs."""

    @nn.compact
    def __call__(self, x, train: bool = False):
        return nn.Dense(4)(nn.RNN(nn.LSTMCell(8))(x)[:, -1])


MODELS = {"mlp": MLP, "convbn": ConvBN, "attention": Attention, "lstm": LSTM}
INPUT_SHAPES = {"mlp": (6,), "convbn": (6, 6, 2), "attention": (5, 8), "lstm": (5, 3)}


def make_input(name: str, batch: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch, *INPUT_SHAPES[name])).astype(np.float32)


def make(name: str, batch: int, seed: int = 0, **module_kwargs):
    """(model, variables, x): variables initialised with `seed`, x of `batch` rows (numpy)."""
    model = MODELS[name](**module_kwargs)
    x = make_input(name, batch, seed + 1)
    variables = model.init(jax.random.key(seed), jnp.asarray(x[:1]))
    return model, variables, x
