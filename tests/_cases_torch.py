"""The stock-vs-dp_torch case table, shared by the CPU-oracle matrix and the virtual-device matrix.

A case is one DataParallel step: model (from _zoo_torch.MODELS), batch, replica count, batch dim
and grad mode. A case expects an error only where its ``error`` says so; any other error, on
either side, fails the test that runs it.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from _zoo_torch import MODELS

BATCHES = (1, 3, 5, 8, 13)
REPLICAS = (1, 2, 3, 4)


@dataclass(frozen=True)
class Case:
    model: str
    batch: int
    replicas: int
    dim: int
    grad: bool
    error: type[Exception] | None = None  # what stock and dp_torch must both raise, if anything

    @property
    def id(self) -> str:
        mode = "grad" if self.grad else "nograd"
        raises = f"-raises-{self.error.__name__}" if self.error else ""
        return f"{self.model}-batch{self.batch}-on{self.replicas}-dim{self.dim}-{mode}{raises}"


# Every model, batch, replica count, dim and grad mode at least once.
DEFAULT_CASES = [
    Case("mlp", 5, 4, 0, True), Case("mlp", 13, 3, 1, True), Case("mlp", 1, 2, 0, False),
    Case("conv_bn", 8, 3, 0, True), Case("conv_bn", 5, 4, 0, False), Case("conv_bn", 3, 1, 0, True),
    Case("lstm", 5, 4, 0, True), Case("lstm", 8, 3, 1, True), Case("lstm", 3, 2, 1, False),
    Case("tied", 13, 4, 0, True), Case("tied", 3, 3, 1, False),
    Case("buffer_with_grad", 8, 2, 0, True), Case("buffer_with_grad", 5, 3, 1, True),
    Case("buffer_with_grad", 1, 4, 0, True),
    # splitting an image batch along its channels: each replica's conv gets 4 channels, not 3
    Case("conv_bn", 8, 2, 1, True, error=RuntimeError),
]


def all_cases() -> list[Case]:
    """Every model x batch x replica count x supported dim x grad mode (none expects an error)."""
    return [Case(name, batch, n, dim, grad)
            for name, spec in MODELS.items()
            for batch, n, dim, grad in itertools.product(BATCHES, REPLICAS, spec.dims, (True, False))]


SLOW_CASES = [case for case in all_cases() if case not in DEFAULT_CASES]
