"""The records of the layer view: one recorded call of a mapped layer, and one row torch beside Flax."""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np


@dataclasses.dataclass(frozen=True)
class Call:
    """One call of a mapped layer as a hook saw it: `layer` indexes the pair's mapping, `replica` is the
    replica that made the call (None on a single device); `input` is the first tensor argument, `output`
    the first tensor of the result (host copies), None where there was none or it was traced."""

    layer: int
    replica: int | None
    input: np.ndarray | None
    output: np.ndarray | None
    traced: bool = False


@dataclasses.dataclass(frozen=True)
class Side:
    """One side of a row (the layer's input or its output), judged torch against Flax.

    `verdict` is "agree" (bitwise, or within the bound with no measured cause), "rounding" (differs within
    the bound the float64 run measured), "differs" (beyond the bound) or "missing" (a side has no value);
    `cause` ("port" | "rounding" | None) comes from the float64 run, as every torch-vs-JAX leaf's does."""

    max_abs: float | None
    rel: float | None
    verdict: str
    cause: str | None = None
    message: str = ""
    attention: str = ""  # on a side that differs: the attention bug its pattern along the positions points to

    @property
    def agrees(self) -> bool:
        return self.verdict in ("agree", "rounding")


@dataclasses.dataclass(frozen=True)
class Row:
    """One call of one mapped layer, torch beside Flax, in torch's execution order (completion order: an
    inner layer's row comes before the layer that contains it)."""

    torch: str
    flax: str
    kind: str
    call: int
    input: Side
    output: Side

    @property
    def has_values(self) -> bool:
        """Whether both sides were recorded on both ends: a "missing" side can neither agree nor part."""
        return "missing" not in (self.input.verdict, self.output.verdict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
