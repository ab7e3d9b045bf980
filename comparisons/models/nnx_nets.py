"""The Flax NNX half of each built-in pair, mirroring `torch_nets.py` as `flax_nets.py` does in linen.

Written as a porting engineer writes NNX: layers built eagerly from the torch constructor's sizes
(`rngs: nnx.Rngs`), attribute names copied from the torch module (so the mapping follows from
`nnx.state` paths), and the mode set by `model.train()` / `model.eval()`, not a call argument.
Defaults copy torch's, not NNX's: LayerNorm epsilon 1e-5 (NNX: 1e-6), exact GELU (NNX: the tanh
approximation), and `TorchBatchNorm` (nnx.BatchNorm keeps the *biased* batch variance in its
running average, torch the unbiased one).

Layout notes for conversion: every layer but the LSTM holds linen's leaves under linen's names, so
each pair's linen mapping converts its NNX twin too. The LSTM is `nnx.RNN(nnx.OptimizedLSTMCell)`, as
porting.md maps torch's nn.LSTM: its `dense_i`/`dense_h` fuse the four gates in torch's order, where
linen's cells keep a kernel per gate, so its pair maps it as kind "lstm_fused" (builtin.py).
`nnx.MultiHeadAttention` keeps linen's per-head (E, heads, head_dim) kernels.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from ..convert import flax_momentum


class TorchBatchNorm(nnx.Module):
    """BatchNorm with torch's statistics: normalise by the biased batch variance, but track the
    unbiased one (n / (n - 1)) in `var`. Same Variable names and mode flag as `nnx.BatchNorm`.

    The NNX form of `flax_nets.TorchBatchNorm`. `momentum` follows Flax (weight of the old running
    value, torch `1 - m`). With `axis_name`, statistics are averaged over that axis (SyncBatchNorm;
    shards must have equal sizes). Mode: `use_running_average`, set by `model.train()/eval()`.
    """

    def __init__(self, num_features: int, *, momentum: float = 0.9, epsilon: float = 1e-5,
                 axis_name: str | None = None, use_running_average: bool = False,
                 param_dtype: jnp.dtype = jnp.float32):
        self.scale = nnx.Param(jnp.ones((num_features,), param_dtype))
        self.bias = nnx.Param(jnp.zeros((num_features,), param_dtype))
        self.mean = nnx.BatchStat(jnp.zeros((num_features,), param_dtype))
        self.var = nnx.BatchStat(jnp.ones((num_features,), param_dtype))
        self.momentum, self.epsilon, self.axis_name = momentum, epsilon, axis_name
        self.use_running_average = use_running_average

    def __call__(self, x: jax.Array) -> jax.Array:
        scale, bias = self.scale[...], self.bias[...]
        if self.use_running_average:
            return (x - self.mean[...]) * jax.lax.rsqrt(self.var[...] + self.epsilon) * scale + bias
        axes, count = tuple(range(x.ndim - 1)), x.size // x.shape[-1]
        mean = self._mean(jnp.mean(x, axes))
        var = self._mean(jnp.mean(jnp.square(x - mean), axes))  # two passes, like torch
        if self.axis_name is not None:
            count = count * jax.lax.psum(1, self.axis_name)
        keep = self.momentum
        self.mean[...] = jax.lax.stop_gradient(keep * self.mean[...] + (1 - keep) * mean)
        unbiased = var * count / max(count - 1, 1)
        self.var[...] = jax.lax.stop_gradient(keep * self.var[...] + (1 - keep) * unbiased)
        return (x - mean) * jax.lax.rsqrt(var + self.epsilon) * scale + bias

    def _mean(self, value: jax.Array) -> jax.Array:
        return value if self.axis_name is None else jax.lax.pmean(value, self.axis_name)


class MLP(nnx.Module):
    """Linear -> tanh -> Linear -> tanh -> Linear."""

    def __init__(self, features: int = 12, hidden: int = 32, classes: int = 5, *, rngs: nnx.Rngs):
        self.fc1 = nnx.Linear(features, hidden, rngs=rngs)
        self.fc2 = nnx.Linear(hidden, hidden, rngs=rngs)
        self.out = nnx.Linear(hidden, classes, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.out(jnp.tanh(self.fc2(jnp.tanh(self.fc1(x)))))


class CNNBN(nnx.Module):
    """Two (Conv, BatchNorm, ReLU) stages with a max-pool between, global average pool, Linear.

    Takes NHWC (the pair transposes torch's NCHW input). `torch_momentum` is torch's BatchNorm
    momentum; the layers get Flax's (1 - m).
    """

    def __init__(self, channels: int = 3, width: int = 8, classes: int = 5, torch_momentum: float = 0.1,
                 *, rngs: nnx.Rngs):
        momentum = flax_momentum(torch_momentum)
        self.conv1 = nnx.Conv(channels, width, (3, 3), padding=((1, 1), (1, 1)), rngs=rngs)
        self.bn1 = TorchBatchNorm(width, momentum=momentum)
        self.conv2 = nnx.Conv(width, 2 * width, (3, 3), padding=((1, 1), (1, 1)), rngs=rngs)
        self.bn2 = TorchBatchNorm(2 * width, momentum=momentum)
        self.fc = nnx.Linear(2 * width, classes, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = nnx.max_pool(nnx.relu(self.bn1(self.conv1(x))), (2, 2), strides=(2, 2))
        x = nnx.relu(self.bn2(self.conv2(x)))
        return self.fc(x.mean(axis=(1, 2)))


class TransformerBlock(nnx.Module):
    """Pre-LN block: x + MHA(LN(x)), then x + MLP(LN(x)); exact GELU. Takes (B, T, E)."""

    def __init__(self, dim: int = 16, heads: int = 4, hidden: int = 32, *, rngs: nnx.Rngs):
        self.ln1 = nnx.LayerNorm(dim, epsilon=1e-5, rngs=rngs)
        self.ln2 = nnx.LayerNorm(dim, epsilon=1e-5, rngs=rngs)
        self.attn = nnx.MultiHeadAttention(num_heads=heads, in_features=dim, decode=False, rngs=rngs)
        self.fc1 = nnx.Linear(dim, hidden, rngs=rngs)
        self.fc2 = nnx.Linear(hidden, dim, rngs=rngs)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = x + self.attn(self.ln1(x))
        return x + self.fc2(nnx.gelu(self.fc1(self.ln2(x)), approximate=False))


class EmbeddingLSTM(nnx.Module):
    """Embed -> nnx.RNN(OptimizedLSTMCell) (zero initial carry) -> Linear on the last step."""

    def __init__(self, vocab: int = 20, dim: int = 8, hidden: int = 16, classes: int = 5, *, rngs: nnx.Rngs):
        self.embed = nnx.Embed(vocab, dim, rngs=rngs)
        self.lstm = nnx.RNN(nnx.OptimizedLSTMCell(dim, hidden, rngs=rngs))
        self.out = nnx.Linear(hidden, classes, rngs=rngs)

    def __call__(self, tokens: jax.Array) -> jax.Array:
        return self.out(self.lstm(self.embed(tokens))[:, -1])
