"""The built-in pairs. Torch and Flax are imported only when a pair's model is made."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..convert import Layer, channels_last_inputs
from .pair import ModelPair, register


def _gaussian(shape: tuple[int, ...], seed: int, dtype: Any) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _labels(batch_size: int, classes: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed + 1).integers(0, classes, batch_size).astype(np.int32)


def _features(batch_size: int, seed: int, dtype: Any):
    return (_gaussian((batch_size, 12), seed, dtype),), _labels(batch_size, 5, seed)


def _images(batch_size: int, seed: int, dtype: Any):
    return (_gaussian((batch_size, 3, 8, 8), seed, dtype),), _labels(batch_size, 5, seed)


def _sequences(batch_size: int, seed: int, dtype: Any):
    return (_gaussian((batch_size, 6, 16), seed, dtype),), _gaussian((batch_size, 6, 16), seed + 1, dtype)


def _tokens(batch_size: int, seed: int, dtype: Any):
    tokens = np.random.default_rng(seed).integers(0, 20, (batch_size, 7)).astype(np.int32)
    return (tokens,), _labels(batch_size, 5, seed)


def cross_entropy_torch(logits, labels):
    """Mean cross-entropy over the batch (torch)."""
    import torch
    return torch.nn.functional.cross_entropy(logits, torch.as_tensor(labels).long())


def cross_entropy_jax(logits, labels):
    """Mean cross-entropy over the batch (JAX), as torch's."""
    import optax
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def mse_torch(output, target):
    """Mean squared error (torch)."""
    import torch
    return torch.nn.functional.mse_loss(output, torch.as_tensor(target))


def mse_jax(output, target):
    """Mean squared error (JAX)."""
    import jax.numpy as jnp
    return jnp.mean(jnp.square(output - target))


def _torch_net(name: str, **kwargs):
    def make():
        from . import torch_nets
        return getattr(torch_nets, name)(**kwargs)
    return make


def _flax_net(name: str, **kwargs):
    def make():
        from . import flax_nets
        return getattr(flax_nets, name)(**kwargs)
    return make


MLP = ModelPair(
    name="mlp",
    make_torch=_torch_net("MLP"), make_flax=_flax_net("MLP"),
    mapping=(Layer("linear", "fc1", "fc1"), Layer("linear", "fc2", "fc2"), Layer("linear", "out", "out")),
    make_inputs=_features,
    loss_torch=cross_entropy_torch, loss_jax=cross_entropy_jax,
    description="Linear-tanh-Linear-tanh-Linear classifier on (B, 12)",
)

CNN_BN = ModelPair(
    name="cnn_bn",
    make_torch=_torch_net("CNNBN"), make_flax=_flax_net("CNNBN"),
    mapping=(Layer("conv", "conv1", "conv1"), Layer("batchnorm", "bn1", "bn1"),
             Layer("conv", "conv2", "conv2"), Layer("batchnorm", "bn2", "bn2"),
             Layer("linear", "fc", "fc")),
    make_inputs=_images,
    to_flax_inputs=channels_last_inputs,
    loss_torch=cross_entropy_torch, loss_jax=cross_entropy_jax,
    has_batch_stats=True,
    description="Conv2d-BatchNorm2d-ReLU x2 with max-pool, global average pool, Linear; NCHW/NHWC",
)

TRANSFORMER_BLOCK = ModelPair(
    name="transformer_block",
    make_torch=_torch_net("TransformerBlock"), make_flax=_flax_net("TransformerBlock"),
    mapping=(Layer("layernorm", "ln1", "ln1"), Layer("mha", "attn", "attn", num_heads=4),
             Layer("layernorm", "ln2", "ln2"), Layer("linear", "fc1", "fc1"),
             Layer("linear", "fc2", "fc2")),
    make_inputs=_sequences,
    loss_torch=mse_torch, loss_jax=mse_jax,
    description="pre-LN transformer block (4 heads, E=16, T=6) regressing (B, 6, 16)",
)

EMBEDDING_LSTM = ModelPair(
    name="embedding_lstm",
    make_torch=_torch_net("EmbeddingLSTM"), make_flax=_flax_net("EmbeddingLSTM"),
    mapping=(Layer("embedding", "embed", "embed"), Layer("lstm", "lstm", "lstm/cell"),
             Layer("linear", "out", "out")),
    make_inputs=_tokens,
    loss_torch=cross_entropy_torch, loss_jax=cross_entropy_jax,
    description="Embedding(20, 8) - LSTM(16) - Linear on the last step, tokens (B, 7)",
)

BUILTIN = (MLP, CNN_BN, TRANSFORMER_BLOCK, EMBEDDING_LSTM)

for _pair in BUILTIN:  # the registry starts with them (`import comparisons.models` imports this module)
    register(_pair)
