"""The torch models every dp_torch test draws from: one definition each, with their inputs.

Used by the CPU-oracle tests (tests/oracle/), the virtual-device tests (tests/virtual/, which put
tests/ on sys.path in their conftest) and the dp_torch unit tests (via dp_torch/_helpers_torch.py).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn


class MLP(nn.Module):
    """fc1 -> tanh -> fc2 over the last dim: works with the batch on dim 0 or dim 1."""

    def __init__(self, features: int = 6, hidden: int = 10, out: int = 3) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(features, hidden), nn.Linear(hidden, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.fc1(x).tanh())


class ConvBN(nn.Module):
    """Conv -> BatchNorm -> relu -> spatial mean -> linear: BN running stats come from chunk 0."""

    def __init__(self) -> None:
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4)
        self.head = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.bn(self.conv(x)).relu().mean(dim=(2, 3)))


class LSTMNet(nn.Module):
    """nn.LSTM inside a module; batch_first=True takes (B,T,F), False takes (T,B,F) (dim 1)."""

    def __init__(self, batch_first: bool = True) -> None:
        super().__init__()
        self.lstm = nn.LSTM(5, 7, batch_first=batch_first)
        self.head = nn.Linear(7, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.lstm(x)[0])


class Tied(nn.Module):
    """Encoder and decoder share one weight (one Parameter under two names), and one child
    is registered under two names."""

    def __init__(self) -> None:
        super().__init__()
        self.encode = nn.Linear(6, 6)
        self.decode = nn.Linear(6, 6)
        self.decode.weight = self.encode.weight
        self.shared = self.encode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decode(torch.tanh(self.shared(x))) + self.encode.weight.sum()


class BufferWithGrad(nn.Module):
    """A buffer that requires grad: replicate must broadcast it with autograd, like a parameter,
    and the original receives the summed gradient."""

    def __init__(self, features: int = 6, out: int = 3) -> None:
        super().__init__()
        self.linear = nn.Linear(features, out)
        self.register_buffer("scale", torch.linspace(0.5, 1.5, out).requires_grad_())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) * self.scale


class TiedLM(nn.Module):
    """Embedding and output projection share one weight; takes integer tokens."""

    def __init__(self, vocab: int = 7, width: int = 4) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(tokens))


@dataclass(frozen=True)
class ModelSpec:
    """How to build one matrix model for a batch dim, and the input shape it takes."""

    build: Callable[[int], nn.Module]              # dim -> module
    input_shape: Callable[[int, int], tuple]       # (batch, dim) -> shape
    dims: tuple[int, ...]                          # the batch dims it supports


def _batch_then(*rest: int) -> Callable[[int, int], tuple]:
    """(batch, *rest) for dim 0, (2, batch, *rest) for dim 1."""
    return lambda batch, dim: (batch, *rest) if dim == 0 else (2, batch, *rest)


MODELS: dict[str, ModelSpec] = {
    "mlp": ModelSpec(lambda dim: MLP(), _batch_then(6), (0, 1)),
    # dim 1 of an image batch is its channels: splitting it is a caller's error, kept for the
    # expected-error case of the matrices (_cases_torch.py)
    "conv_bn": ModelSpec(lambda dim: ConvBN(),
                         lambda batch, dim: (batch, 3, 5, 5) if dim == 0 else (3, batch, 5, 5), (0,)),
    "lstm": ModelSpec(lambda dim: LSTMNet(batch_first=dim == 0),
                      lambda batch, dim: (batch, 4, 5) if dim == 0 else (3, batch, 5), (0, 1)),
    "tied": ModelSpec(lambda dim: Tied(), _batch_then(6), (0, 1)),
    "buffer_with_grad": ModelSpec(lambda dim: BufferWithGrad(), _batch_then(6), (0, 1)),
}


def make_model(name: str, seed: int, dim: int = 0) -> nn.Module:
    """MODELS[name] for batch dim ``dim``, initialised from ``seed``, in training mode."""
    torch.manual_seed(seed)
    return MODELS[name].build(dim).train()


def model_input(name: str, batch: int, generator: torch.Generator, dim: int = 0) -> torch.Tensor:
    """A random input for MODELS[name] with ``batch`` rows along ``dim``."""
    return torch.randn(*MODELS[name].input_shape(batch, dim), generator=generator)
