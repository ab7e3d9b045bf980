"""Shared models and helpers for the dp_torch tests (N replicas on the CPU)."""
from __future__ import annotations

import copy

import torch
from torch import nn


def cpus(n: int) -> list[str]:
    """n replicas on the CPU."""
    return ["cpu"] * n


def mlp(seed: int, d_in: int = 5, d_out: int = 3, batchnorm: bool = False) -> nn.Module:
    torch.manual_seed(seed)
    norm = nn.BatchNorm1d(8) if batchnorm else nn.LayerNorm(8)
    return nn.Sequential(nn.Linear(d_in, 8), norm, nn.Tanh(), nn.Linear(8, d_out))


def twin(module: nn.Module) -> nn.Module:
    """An independent copy, to run the single-device reference on."""
    return copy.deepcopy(module)


def grads(module: nn.Module) -> dict[str, torch.Tensor | None]:
    return {name: p.grad for name, p in module.named_parameters()}


def assert_same_grads(actual: nn.Module, expected: nn.Module, atol: float = 1e-5) -> None:
    for (name, a), (_, e) in zip(actual.named_parameters(), expected.named_parameters()):
        assert (a.grad is None) == (e.grad is None), name
        if a.grad is not None:
            torch.testing.assert_close(a.grad, e.grad, atol=atol, rtol=1e-4, msg=name)


class TiedLM(nn.Module):
    """Embedding and output projection share one weight."""

    def __init__(self, vocab: int = 7, width: int = 4) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(tokens))


class ScaledByBuffer(nn.Module):
    """Output = linear(x) * scale, where scale is a buffer that requires grad."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 2)
        self.register_buffer("scale", torch.tensor([1.5, -0.5], requires_grad=True))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) * self.scale
