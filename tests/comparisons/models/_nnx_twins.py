"""Small torch models and their Flax NNX twins, written as a porting engineer writes them (NNX defaults unless
torch's differ), for the NNX tests: an MLP with BatchNorm, and a causal LM with RMSNorm and tied embeddings."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch
from flax import nnx

from comparisons.models import pair_from_modules


class TorchMLP(torch.nn.Module):
    """Per-token MLP over (N, L, F), BatchNorm over (N, L) per channel, mean over L."""

    def __init__(self, width: int = 8):
        super().__init__()
        self.blocks = torch.nn.ModuleList([torch.nn.Linear(6, width), torch.nn.Linear(width, width)])
        self.bn = torch.nn.BatchNorm1d(width)
        self.head = torch.nn.Linear(width, 3)

    def forward(self, x):
        for block in self.blocks:
            x = torch.tanh(block(x))
        return self.head(self.bn(x.transpose(1, 2)).transpose(1, 2)).mean(1)


class NNXMLP(nnx.Module):
    def __init__(self, width: int = 8, *, momentum: float = 0.9, rngs: nnx.Rngs):
        self.blocks = nnx.List([nnx.Linear(6, width, rngs=rngs), nnx.Linear(width, width, rngs=rngs)])
        self.bn = nnx.BatchNorm(width, momentum=momentum, epsilon=1e-5, rngs=rngs)
        self.head = nnx.Linear(width, 3, rngs=rngs)

    def __call__(self, x):
        for block in self.blocks:
            x = jnp.tanh(block(x))
        return self.head(self.bn(x)).mean(1)


def mlp_inputs(batch_size, seed, dtype):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((batch_size, 4, 6)).astype(dtype),), rng.integers(0, 3, batch_size).astype(np.int32)


def mlp_pair(momentum: float = 0.9, seed: int = 0, known_differences: tuple = ("flax_batchnorm_biased_var",)):
    torch.manual_seed(seed)
    return pair_from_modules("mlp_nnx", TorchMLP(), NNXMLP(momentum=momentum, rngs=nnx.Rngs(seed)),
                             make_inputs=mlp_inputs, loss_torch=_ce_torch, loss_jax=_ce_jax,
                             known_differences=known_differences)


VOCAB, WIDTH, HEADS, LENGTH = 11, 8, 2, 5


class TorchBlock(torch.nn.Module):
    def __init__(self, eps: float):
        super().__init__()
        self.norm1, self.norm2 = torch.nn.RMSNorm(WIDTH, eps=eps), torch.nn.RMSNorm(WIDTH, eps=eps)
        self.q, self.k, self.v, self.o = (torch.nn.Linear(WIDTH, WIDTH, bias=False) for _ in range(4))
        self.up, self.down = torch.nn.Linear(WIDTH, 2 * WIDTH), torch.nn.Linear(2 * WIDTH, WIDTH)

    def forward(self, x):
        n, t, _ = x.shape
        h = self.norm1(x)
        q, k, v = (f(h).view(n, t, HEADS, -1).transpose(1, 2) for f in (self.q, self.k, self.v))
        attended = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(attended.transpose(1, 2).reshape(n, t, WIDTH))
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm2(x)), approximate="tanh"))


class TorchLM(torch.nn.Module):
    def __init__(self, eps: float = 1e-6):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.blocks = torch.nn.ModuleList([TorchBlock(eps)])
        self.norm = torch.nn.RMSNorm(WIDTH, eps=eps)
        self.lm_head = torch.nn.Linear(WIDTH, VOCAB, bias=False)
        self.lm_head.weight = self.embed.weight

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.norm(x))


class NNXBlock(nnx.Module):
    def __init__(self, *, rngs: nnx.Rngs):
        self.norm1, self.norm2 = nnx.RMSNorm(WIDTH, rngs=rngs), nnx.RMSNorm(WIDTH, rngs=rngs)
        self.q, self.k, self.v, self.o = (nnx.Linear(WIDTH, WIDTH, use_bias=False, rngs=rngs) for _ in range(4))
        self.up, self.down = nnx.Linear(WIDTH, 2 * WIDTH, rngs=rngs), nnx.Linear(2 * WIDTH, WIDTH, rngs=rngs)

    def __call__(self, x):
        n, t, _ = x.shape
        h = self.norm1(x)
        q, k, v = (f(h).reshape(n, t, HEADS, -1) for f in (self.q, self.k, self.v))
        scores = jnp.einsum("nqhd,nkhd->nhqk", q, k) / np.sqrt(WIDTH // HEADS)
        scores = jnp.where(jnp.tril(jnp.ones((t, t), bool)), scores, -jnp.inf)
        attended = jnp.einsum("nhqk,nkhd->nqhd", jax.nn.softmax(scores, axis=-1), v)
        x = x + self.o(attended.reshape(n, t, WIDTH))
        return x + self.down(jax.nn.gelu(self.up(self.norm2(x)), approximate=True))


class NNXLM(nnx.Module):
    """Tied: the output layer is the embedding's `attend`; nnx defaults (Embed in float32, RMSNorm epsilon 1e-6)."""

    def __init__(self, *, rngs: nnx.Rngs):
        self.embed = nnx.Embed(VOCAB, WIDTH, rngs=rngs)
        self.blocks = nnx.List([NNXBlock(rngs=rngs)])
        self.norm = nnx.RMSNorm(WIDTH, rngs=rngs)

    def __call__(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.embed.attend(self.norm(x))


def lm_inputs(batch_size, seed, dtype):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, VOCAB, (batch_size, LENGTH + 1)).astype(np.int32)
    return (tokens[:, :-1],), tokens[:, 1:]


def lm_loss_torch(logits, targets):
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), torch.as_tensor(targets).long().flatten())


def lm_loss_jax(logits, targets):
    return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()


def lm_pair(torch_eps: float = 1e-6, seed: int = 0):
    torch.manual_seed(seed)
    return pair_from_modules("lm_nnx", TorchLM(torch_eps), NNXLM(rngs=nnx.Rngs(seed)), make_inputs=lm_inputs,
                             loss_torch=lm_loss_torch, loss_jax=lm_loss_jax)


def _ce_torch(logits, labels):
    return torch.nn.functional.cross_entropy(logits, torch.as_tensor(labels).long())


def _ce_jax(logits, labels):
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
