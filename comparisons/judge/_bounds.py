"""`Bounds`, how numbers are judged, and `Sides`, torch's value beside the JAX side's: one record each.

Every judge of numbers (numerics, precision, the runs' checks, the layer view) takes its bound as one
`Bounds` and a pair of sides as one `Sides`, never as loose floats or a bare tuple whose order a caller
could swap.
"""
from __future__ import annotations

from typing import Any, NamedTuple


class Bounds(NamedTuple):
    """The element-wise bound |a - b| <= atol + rtol |b| of every leaf, and what a difference is blamed on.

    rtol: relative tolerance. atol: the user's absolute one (None: derived per leaf from its scale and its
    measured rounding, judge/_leaves.py). cause: written on every leaf that differs ("data_parallel" for DP vs
    single); "port" (a float64 run's torch vs JAX) goes on failing leaves and "rounding" on the ones within
    the bound; None: no cause, unless a float64 run measures one.
    """

    rtol: float
    atol: float | None = None
    cause: str | None = None


class Sides(NamedTuple):
    """One value per framework: torch's and the JAX (Flax) side's."""

    torch: Any
    flax: Any
