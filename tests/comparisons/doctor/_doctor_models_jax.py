"""Broken (and sound) Flax models for the JAX doctor's tests; `# doctor: <kind>` marks the expected line."""
import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from comparisons.models.nnx_nets import TorchBatchNorm

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


# --- Flax NNX modules, given to the doctor as they are: doctor_jax(model, *inputs) ---------------------------


class NNXBlock(nnx.Module):
    """A Linear and a LayerNorm with the given epsilon (nnx's default 1e-6 is an nnx-default at blocks[i].norm)."""

    def __init__(self, features: int, epsilon: float, rngs: nnx.Rngs):
        self.fc = nnx.Linear(features, features, rngs=rngs)
        self.norm = nnx.LayerNorm(features, epsilon=epsilon, rngs=rngs)  # doctor: nnx-default

    def __call__(self, x):
        return self.norm(self.fc(x))


class NNXTrapped(nnx.Module):
    """Flax's defaults where torch's differ: nnx.Embed's float32, LayerNorm epsilon 1e-6, BatchNorm momentum 0.99."""

    def __init__(self, features: int, blocks: int, rngs: nnx.Rngs):
        self.embed = nnx.Embed(10, features, rngs=rngs)  # doctor: nnx-default
        self.blocks = nnx.List([NNXBlock(features, 1e-6, rngs) for _ in range(blocks)])
        self.bn = nnx.BatchNorm(features, rngs=rngs)  # doctor: nnx-default

    def __call__(self, x, tokens):
        h = x + self.embed(tokens)
        for block in self.blocks:
            h = block(h)
        return self.bn(h)


class NNXHonest(nnx.Module):
    """torch's settings: LayerNorm eps 1e-5, a BatchNorm with torch's momentum and unbiased running variance."""

    def __init__(self, features: int, blocks: int, rngs: nnx.Rngs):
        self.blocks = nnx.List([NNXBlock(features, 1e-5, rngs) for _ in range(blocks)])
        self.bn = TorchBatchNorm(features, momentum=0.9)

    def __call__(self, x):
        for block in self.blocks:
            x = block(x)
        return self.bn(x)


class NNXOffset(nnx.Module):
    """Adds the committed global OFFSET, as Offset does in linen (closed-over-array)."""

    def __init__(self, rngs: nnx.Rngs):
        self.fc = nnx.Linear(3, 2, rngs=rngs)

    def __call__(self, x):
        return self.fc(x) + OFFSET  # doctor: closed-over-array


class NNXShifted(nnx.Module):
    """Holds a committed array as a plain array attribute, which nnx.split carries as state (clean)."""

    def __init__(self, shift: jax.Array, rngs: nnx.Rngs):
        self.fc = nnx.Linear(3, 2, rngs=rngs)
        self.shift = shift

    def __call__(self, x):
        return self.fc(x) + self.shift + SHIFT


@dataclasses.dataclass(frozen=True)
class Table:
    values: Any


class NNXStaticTable(nnx.Module):
    """Holds a committed array inside a frozen dataclass, a static attribute (closed-over-array at its path)."""

    def __init__(self, table: jax.Array, rngs: nnx.Rngs):
        self.fc = nnx.Linear(3, 2, rngs=rngs)
        self.table = Table(table)  # doctor: closed-over-array

    def __call__(self, x):
        return self.fc(x) * self.table.values


class NNXRemembers(nnx.Module):
    """Appends its input to a global list (side-effect-in-trace) and counts calls on self (state-on-self)."""

    def __init__(self, rngs: nnx.Rngs):
        self.fc = nnx.Linear(3, 2, rngs=rngs)
        self.calls = 0

    def __call__(self, x):
        SEEN.append(x)  # doctor: side-effect-in-trace
        self.calls += 1  # doctor: state-on-self
        return self.fc(x)
