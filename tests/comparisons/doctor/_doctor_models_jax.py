"""Broken (and sound) Flax models for the JAX doctor's tests; `# doctor: <kind>` marks the expected line."""
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

OFFSET = jax.device_put(np.ones(2, np.float32), jax.devices()[1])  # committed to device 1
SHIFT = jnp.ones(2)                                                # uncommitted: follows the computation
SEEN = []
CALLS = 0
LATEST = {"input": None}  # a global dict with the key already there


class Offset(nn.Module):
    """Adds a committed global array (closed-over-array)."""

    @nn.compact
    def __call__(self, x):
        return nn.Dense(2)(x) + OFFSET  # doctor: closed-over-array


class Field(nn.Module):
    """Holds a committed array as a module field (closed-over-array at self.table)."""

    table: Any = None

    @nn.compact
    def __call__(self, x):
        return nn.Dense(2)(x) * self.table  # doctor: closed-over-array


class Shifted(nn.Module):
    """Adds an uncommitted global array and a numpy constant (clean)."""

    @nn.compact
    def __call__(self, x):
        return nn.Dense(2)(x) + SHIFT + np.float32(0.5)


class Remembers(nn.Module):
    """Appends its input to a global list while tracing (side-effect-in-trace)."""

    @nn.compact
    def __call__(self, x):
        SEEN.append(x)  # doctor: side-effect-in-trace
        return nn.Dense(2)(x)


class Counts(nn.Module):
    """Counts calls in a global (side-effect-in-trace: the count is of traces, not steps)."""

    @nn.compact
    def __call__(self, x):
        global CALLS
        CALLS += 1  # doctor: side-effect-in-trace
        return nn.Dense(2)(x)


class StoresLatest(nn.Module):
    """Assigns to an existing key of a global dict while tracing (side-effect-in-trace)."""

    @nn.compact
    def __call__(self, x):
        LATEST["input"] = x  # doctor: side-effect-in-trace
        return nn.Dense(2)(x)


class Prints(nn.Module):
    """print() in __call__ (side-effect-in-trace)."""

    @nn.compact
    def __call__(self, x):
        print("batch", x.shape)  # doctor: side-effect-in-trace
        return nn.Dense(2)(x)


class BatchSized(nn.Module):
    """Reshapes with the global batch size (run-error)."""

    @nn.compact
    def __call__(self, x):
        return nn.Dense(2)(x).reshape(8, -1)  # doctor: run-error
