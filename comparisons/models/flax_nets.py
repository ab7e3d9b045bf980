"""The Flax half of each built-in pair, mirroring `torch_nets.py`; every `__call__` takes `train`.

Defaults copy torch's, not Flax's: LayerNorm epsilon 1e-5 (Flax: 1e-6), exact GELU (Flax:
tanh approximation), and `TorchBatchNorm` (Flax's BatchNorm keeps the *biased* batch variance in
its running average, torch the unbiased one).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import linen as nn

from ..convert import flax_momentum


class TorchBatchNorm(nn.Module):
    """BatchNorm with torch's statistics: normalise by the biased batch variance, but track the
    unbiased one (n / (n - 1)) in `batch_stats/var`. Same variable names as `nn.BatchNorm`.

    `momentum` follows Flax (weight of the old running value, torch `1 - m`). With `axis_name`,
    statistics are averaged over that axis (SyncBatchNorm; shards must have equal sizes).
    """
    momentum: float = 0.9
    epsilon: float = 1e-5
    axis_name: str | None = None

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
        features = x.shape[-1]
        scale = self.param("scale", nn.initializers.ones, (features,))
        bias = self.param("bias", nn.initializers.zeros, (features,))
        mean_stat = self.variable("batch_stats", "mean", jnp.zeros, (features,), x.dtype)
        var_stat = self.variable("batch_stats", "var", jnp.ones, (features,), x.dtype)
        if not train:
            return (x - mean_stat.value) * jax.lax.rsqrt(var_stat.value + self.epsilon) * scale + bias
        axes, count = tuple(range(x.ndim - 1)), x.size // features
        mean = self._mean(jnp.mean(x, axes))
        var = self._mean(jnp.mean(jnp.square(x - mean), axes))  # two passes, like torch
        if self.axis_name is not None:
            count = count * jax.lax.psum(1, self.axis_name)
        if not self.is_initializing():
            keep = self.momentum
            mean_stat.value = keep * mean_stat.value + (1 - keep) * mean
            var_stat.value = keep * var_stat.value + (1 - keep) * var * count / max(count - 1, 1)
        return (x - mean) * jax.lax.rsqrt(var + self.epsilon) * scale + bias

    def _mean(self, value: jax.Array) -> jax.Array:
        return value if self.axis_name is None else jax.lax.pmean(value, self.axis_name)


class MLP(nn.Module):
    """Dense -> tanh -> Dense -> tanh -> Dense."""
    hidden: int = 32
    classes: int = 5

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
        x = jnp.tanh(nn.Dense(self.hidden, name="fc1")(x))
        x = jnp.tanh(nn.Dense(self.hidden, name="fc2")(x))
        return nn.Dense(self.classes, name="out")(x)


class CNNBN(nn.Module):
    """Takes NHWC (the pair transposes torch's NCHW input)."""
    width: int = 8
    classes: int = 5
    torch_momentum: float = 0.1

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
        def bn(name):
            return TorchBatchNorm(momentum=flax_momentum(self.torch_momentum), name=name)
        x = nn.Conv(self.width, (3, 3), padding=((1, 1), (1, 1)), name="conv1")(x)
        x = nn.max_pool(nn.relu(bn("bn1")(x, train)), (2, 2), strides=(2, 2))
        x = nn.Conv(2 * self.width, (3, 3), padding=((1, 1), (1, 1)), name="conv2")(x)
        x = nn.relu(bn("bn2")(x, train))
        return nn.Dense(self.classes, name="fc")(x.mean(axis=(1, 2)))


class TransformerBlock(nn.Module):
    """Pre-LN block: x + MHA(LN(x)), then x + MLP(LN(x)); exact GELU. Takes (B, T, E)."""
    heads: int = 4
    hidden: int = 32

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
        h = nn.LayerNorm(epsilon=1e-5, name="ln1")(x)
        x = x + nn.MultiHeadDotProductAttention(num_heads=self.heads, name="attn")(h)
        h = nn.Dense(self.hidden, name="fc1")(nn.LayerNorm(epsilon=1e-5, name="ln2")(x))
        return x + nn.Dense(x.shape[-1], name="fc2")(nn.gelu(h, approximate=False))


class EmbeddingLSTM(nn.Module):
    """Embed -> nn.RNN(OptimizedLSTMCell) (zero initial carry) -> Dense on the last step."""
    vocab: int = 20
    dim: int = 8
    hidden: int = 16
    classes: int = 5

    @nn.compact
    def __call__(self, tokens: jax.Array, train: bool = False) -> jax.Array:
        x = nn.Embed(self.vocab, self.dim, name="embed")(tokens)
        # parent=None lets the RNN adopt the cell, so its params live under 'lstm/cell'
        cell = nn.OptimizedLSTMCell(self.hidden, param_dtype=x.dtype, parent=None)
        states = nn.RNN(cell, name="lstm")(x)
        return nn.Dense(self.classes, name="out")(states[:, -1])
