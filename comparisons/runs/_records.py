"""The records of a comparison's runs: what every run takes (RunConfig, RunInputs) and what it gives (Snapshot,
BackendRun)."""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from comparisons.placement import PlacementMap


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
    trajectory: Trajectory | None = None  # every step's loss, gradients and parameters, when recorded


@dataclasses.dataclass
class Trajectory:
    """Every training step of one pipeline, in the Flax layout, for the drift per step (judge/_drift.py).

    losses[k], gradients[k]: step k's loss and parameter gradients (on the parameters before its update);
    params[k]: the parameters after step k's update. Host numpy trees; recorded only when `RunConfig.trajectory`.
    """

    losses: list[float] = dataclasses.field(default_factory=list)
    gradients: list[Any] = dataclasses.field(default_factory=list)
    params: list[Any] = dataclasses.field(default_factory=list)

    def add(self, loss: float, gradients: Any, params: Any) -> None:
        self.losses.append(float(loss))
        self.gradients.append(gradients)
        self.params.append(params)


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


@dataclasses.dataclass
class Float64Reference:
    """Both frameworks' single-device run (the chunks one after another) in float64, on the float32 run's
    weights and inputs cast: what tells a port difference from rounding (docs/report_schema.md#causes)."""

    torch: Snapshot
    jax: Snapshot


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """One comparison's settings, validated by the harness."""

    batch_size: int
    steps: int
    optimizer: str
    dtype: str
    seed: int
    dim: int
    trajectory: bool = False  # record every step (Snapshot.trajectory): the harness's drift per step


@dataclasses.dataclass(frozen=True)
class RunInputs:
    """What every backend run of one comparison trains on: the pair, the settings, the inputs and targets
    (numpy, torch's layout, `config.batch_size` rows on the pair's batch axis)."""

    pair: Any
    config: RunConfig
    inputs: tuple[np.ndarray, ...]
    targets: Any
