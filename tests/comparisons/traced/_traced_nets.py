"""torch models with no Flax twin, for the traced (torchax) comparisons: factories, inputs and losses at
module level, so the JAX worker process imports them by name."""
import numpy as np
import torch
from torch import nn


def conv_bn():
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                         nn.Linear(4 * 5 * 5, 3))


def mlp_layernorm():
    return nn.Sequential(nn.Linear(6, 16), nn.LayerNorm(16), nn.GELU(), nn.Linear(16, 3))


class AttentionBlock(nn.Module):
    def __init__(self, width=8, heads=2):
        super().__init__()
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, 3)

    def forward(self, x):
        mixed, _ = self.attn(x, x, x, need_weights=False)
        return self.head(self.norm(x + mixed)).mean(1)


class LstmHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(5, 8, batch_first=True)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


class Gpt2Logits(nn.Module):
    """transformers' torch GPT2LMHeadModel from a tiny config (random weights), returning the logits."""

    def __init__(self):
        super().__init__()
        from transformers import GPT2Config, GPT2LMHeadModel

        config = GPT2Config(vocab_size=50, n_positions=16, n_embd=16, n_layer=2, n_head=2, resid_pdrop=0.0,
                            embd_pdrop=0.0, attn_pdrop=0.0)
        self.model = GPT2LMHeadModel(config)

    def forward(self, ids):
        return self.model(ids, use_cache=False).logits


class CountingBuffer(nn.Module):
    """A registered buffer updated in forward by tensor ops: the trace returns it as a new value."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)
        self.register_buffer("seen", torch.zeros(4))

    def forward(self, x):
        self.seen.add_(x.detach().abs().sum(0))
        return self.fc(x)


class RebindsBuffer(nn.Module):
    """A buffer replaced by assignment in forward: torch keeps the new tensor, a functional trace does not."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)
        self.register_buffer("last_mean", torch.zeros(4))

    def forward(self, x):
        self.last_mean = x.detach().mean(0)
        return self.fc(x)


class Untraceable(nn.Module):
    """aten.segment_reduce has no torchax lowering (torchax 0.0.14.dev20261026)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        y = self.fc(x)
        sums = torch.segment_reduce(y.flatten(), "sum", lengths=torch.full((x.shape[0],), 2))
        return y + sums[:, None]


def images(batch, seed, dtype):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((batch, 3, 5, 5)).astype(dtype),), rng.standard_normal((batch, 3)).astype(dtype)


def rows(width):
    def make(batch, seed, dtype):
        rng = np.random.default_rng(seed)
        return (rng.standard_normal((batch, width)).astype(dtype),), rng.standard_normal((batch, 3)).astype(dtype)
    return make


def rows6(batch, seed, dtype):
    return rows(6)(batch, seed, dtype)


def rows4(batch, seed, dtype):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((batch, 4)).astype(dtype),), rng.standard_normal((batch, 2)).astype(dtype)


def sequences(width):
    def make(batch, seed, dtype):
        rng = np.random.default_rng(seed)
        return ((rng.standard_normal((batch, 4, width)).astype(dtype),),
                rng.standard_normal((batch, 3)).astype(dtype))
    return make


def sequences8(batch, seed, dtype):
    return sequences(8)(batch, seed, dtype)


def sequences5(batch, seed, dtype):
    return sequences(5)(batch, seed, dtype)


def token_ids(batch, seed, dtype):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 50, (batch, 6)).astype(np.int64)
    return (ids,), rng.integers(0, 50, (batch, 6)).astype(np.int64)


def mse(output, targets):
    return torch.nn.functional.mse_loss(output, targets)


def next_token(logits, targets):
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
