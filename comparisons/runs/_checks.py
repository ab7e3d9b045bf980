"""What a user pair's functions return, checked as the runs call them (make_inputs, the losses).

Every message names the pair, its function, the value and the fix. Nothing here imports torch or JAX.
"""
from __future__ import annotations

from typing import Any

from comparisons.errors import ComparisonError


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
