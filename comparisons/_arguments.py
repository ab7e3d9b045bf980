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


def pair_inputs(pair: Any, inputs: Any, batch_size: int) -> None:
    """make_inputs(batch_size, ...) returned inputs, a tuple of arrays with `batch_size` rows on pair.batch_axis.

    Targets are not checked: the loss takes them whole, in whatever layout the pair chose.
    """
    where = f"compare: pair {pair.name!r}: make_inputs(batch_size={batch_size}, seed, dtype)"
    if not isinstance(inputs, tuple) or not inputs:
        raise ComparisonError(f"{where} returned inputs {type(inputs).__name__}; return (inputs, targets) "
                              "with inputs a non-empty tuple of numpy arrays")
    axis = pair.batch_axis
    for label, array in [(f"inputs[{i}]", x) for i, x in enumerate(inputs)]:
        shape = getattr(array, "shape", None)
        if shape is None or len(shape) <= axis:
            raise ComparisonError(f"{where} returned {label} of shape {shape} with no batch axis {axis}; "
                                  "return numpy arrays with the batch on pair.batch_axis")
        if shape[axis] != batch_size:
            raise ComparisonError(f"{where} returned {label} with {shape[axis]} rows on axis {axis} "
                                  f"(shape {tuple(shape)}); make_inputs must return batch_size rows")


def scalar_loss(pair_name: str, function: str, loss: Any) -> Any:
    """`loss` unchanged when it is a scalar; else an error naming the pair, its function and the shape."""
    shape = tuple(getattr(loss, "shape", ()))
    if shape:
        raise ComparisonError(f"compare: pair {pair_name!r}: {function}(output, targets) returned shape "
                              f"{shape}; return a scalar (e.g. the mean over the batch), as backward/grad need")
    return loss
