"""Shared helpers for the dp_torch tests (N replicas on the CPU); the models are in _zoo_torch."""
from __future__ import annotations

import copy

import torch
from _zoo_torch import BufferWithGrad, TiedLM  # noqa: F401  (TiedLM: re-exported for the tests)
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


def ScaledByBuffer() -> nn.Module:  # noqa: N802 - reads as the model class it builds
    """Output = linear(x) * scale, where scale is a buffer that requires grad (3 -> 2 features)."""
    return BufferWithGrad(features=3, out=2)
