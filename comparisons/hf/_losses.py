"""Losses for transformers outputs: given (cross-entropy on `logits`) or derived from the head.

A head with `logits` trains on cross-entropy against integer labels shaped like the logits less
their last axis; a base model (no logits) on the mean square of its main hidden state.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


def _field(output: Any, name: str) -> Any:
    return output[name] if isinstance(output, dict) or hasattr(output, "keys") else getattr(output, name)


def cross_entropy_torch(output: Any, labels: Any) -> Any:
    """Mean cross-entropy of `output.logits` (..., classes) against integer labels (...)."""
    import torch

    logits = _field(output, "logits")
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                             torch.as_tensor(labels).long().reshape(-1))


def cross_entropy_jax(output: Any, labels: Any) -> Any:
    """The same loss in JAX."""
    import optax

    return optax.softmax_cross_entropy_with_integer_labels(_field(output, "logits"), labels).mean()


def hidden_square_losses(field: str) -> tuple[Callable, Callable]:
    """(torch loss, JAX loss): the mean square of `output[field]`, the targets unused."""
    def loss_torch(output: Any, targets: Any) -> Any:
        return _field(output, field).pow(2).mean()

    def loss_jax(output: Any, targets: Any) -> Any:
        return (_field(output, field) ** 2).mean()
    return loss_torch, loss_jax


def head_of(shapes: dict[str, tuple[int, ...]]) -> tuple[str, tuple[int, ...]]:
    """('logits', its shape) when the probed output {field: shape} has logits, else its first field."""
    field = "logits" if "logits" in shapes else next(iter(shapes))
    return field, shapes[field]


def labels_for(logits_shape: tuple[int, ...]) -> Callable[[np.random.Generator, int], np.ndarray]:
    """Integer labels in [0, classes) shaped (B, *logits_shape[1:-1]) for logits (probe B, ..., classes)."""
    classes, middle = logits_shape[-1], logits_shape[1:-1]

    def labels(rng: np.random.Generator, batch_size: int) -> np.ndarray:
        return rng.integers(0, classes, (batch_size, *middle)).astype(np.int32)
    return labels
