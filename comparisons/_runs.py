"""What one backend run produces, and the settings shared by the torch and JAX runs."""
from __future__ import annotations

import dataclasses
from typing import Any

from comparisons.placement import PlacementMap

# Hyper-parameters of each optimizer, identical on both sides (torch defaults otherwise:
# SGD dampening 0, no nesterov; Adam betas (0.9, 0.999), eps 1e-8 added after the sqrt,
# which are optax's defaults too).
OPTIMIZERS: dict[str, dict[str, float]] = {
    "sgd": {"lr": 0.05},
    "momentum": {"lr": 0.05, "momentum": 0.9},
    "adam": {"lr": 0.01},
}


@dataclasses.dataclass
class Snapshot:
    """Values of one pipeline (data-parallel or single-device), in the Flax layout; one per check subject.

    outputs: the first step's (gathered) output; gradients: the first step's parameter gradients;
    batch_stats: running statistics after the first training-mode forward; params_after_steps: the
    parameters after every optimizer step.
    """

    outputs: Any
    gradients: Any
    batch_stats: Any
    params_after_steps: Any
    unused_parameters: tuple[str, ...] = ()  # torch parameters the loss gave no gradient (torch only)


@dataclasses.dataclass
class BackendRun:
    """A backend's data-parallel run and its single-device reference on the same weights/inputs."""

    label: str
    dp: Snapshot
    single: Snapshot
    placement: PlacementMap
    chunk_sizes: list[int]
    parameter_count: int
    notes: list[str] = dataclasses.field(default_factory=list)
    padded_replica: int | None = None  # the replica whose input chunk a mapped strategy padded
    initial_batch_stats: Any = None  # the Flax batch_stats before training (JAX runs)
    eager: Snapshot | None = None  # the eager path's run when `dp` came from dp_jax's compiled step


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """One comparison's settings, validated by the harness."""

    batch_size: int
    steps: int
    optimizer: str
    dtype: str
    seed: int
    dim: int
