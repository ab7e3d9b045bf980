"""compare()'s arguments and a user pair's functions, checked before any work runs.

Every message names the argument (or the pair and its function), the value, and the fix.
Nothing here imports torch or JAX.
"""
from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any

from comparisons.errors import ComparisonError


def positive(name: str, value: Any) -> int:
    """`value` as an int >= 1 (numpy integers too; not bools, floats or strings)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ComparisonError(f"compare: {name}={value!r}{_type_of(value)}; pass a positive integer")
    return int(value)


def _type_of(value: Any) -> str:
    """' (a str)' for a value whose repr may hide that it is not an int (e.g. numpy scalars), else ''."""
    return "" if type(value) is int else f" (a {type(value).__name__})"


def seed(value: Any) -> int:
    """A seed numpy's default_rng and torch.manual_seed both take: an int >= 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ComparisonError(f"compare: seed={value!r}{_type_of(value)}; pass an integer >= 0, "
                              "e.g. seed=0")
    return int(value)


def progress(value: Any) -> Callable[[str, int], None] | None:
    """None or a callable taking (label, total_steps)."""
    if value is not None and not callable(value):
        raise ComparisonError(f"compare: progress={value!r} is not callable; pass a function "
                              "progress(label: str, total_steps: int), or None")
    return value


def strategy_names(value: Any) -> Any:
    """None or a sequence of names; one bare string is refused (it would iterate letter by letter)."""
    if isinstance(value, str):
        raise ComparisonError(f"compare: strategies={value!r} is one string; pass a list, "
                              f"strategies=[{value!r}]")
    if value is not None and not hasattr(value, "__iter__"):
        raise ComparisonError(f"compare: strategies={value!r} is not a list of names; pass e.g. "
                              "strategies=['explicit'], or None for every strategy that applies")
    return value


def tolerance(name: str, value: Any) -> float | None:
    """None (the default for the dtype, or derived) or a finite number >= 0 (not a bool or a string)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value >= 0 or value == float("inf"):
        raise ComparisonError(f"compare: {name}={value!r}{_type_of(value)}; pass a finite number >= 0, e.g. "
                              f"{name}=1e-5, or None for the default")
    return float(value)
