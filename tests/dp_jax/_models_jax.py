"""The one Flax model zoo of the tests: MLP, conv net with BatchNorm, attention block, LSTM, and a scaled MLP.

Each zoo model takes (x, train) and returns per-row outputs; `make(name, batch, seed)` gives the model,
its variables and an input batch of fresh random data. `ScaledMLP` takes a non-array `scale` instead
(static under jit); `mlp_and_variables(seed)` and `batch(seed, size)` serve the dp_jax step tests.
"""
from __future__ import annotations

import functools
from typing import Any

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


class ScaledMLP(nn.Module):
    """A small Dense stack; `scale` is a non-array argument (static under jit)."""

    widths: tuple[int, ...] = (16, 16, 3)

    @nn.compact
    def __call__(self, x: jax.Array, scale: float = 1.0) -> jax.Array:
        for width in self.widths[:-1]:
            x = nn.tanh(nn.Dense(width)(x))
        return nn.Dense(self.widths[-1])(x) * scale


@functools.cache
def _jitted_init(features: int):
    return jax.jit(lambda seed: ScaledMLP().init(jax.random.key(seed), np.zeros((1, features), np.float32)))


def mlp_and_variables(seed: int, features: int = 5) -> tuple[ScaledMLP, Any]:
    """An MLP and fresh variables (uncommitted, on the default device); one compile per width."""
    return ScaledMLP(), _jitted_init(features)(seed)


def batch(seed: int, size: int, features: int = 5) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(size, features)).astype(np.float32)


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
