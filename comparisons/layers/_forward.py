"""One single-device training-mode forward per side, every mapped layer recorded: what the layer view lines up.

Training mode, as the checks' first step runs (BatchNorm normalises by the batch); no gradient is taken.
The float64 forward runs on the same weights and the inputs cast, torch on the CPU and JAX under x64.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from comparisons.judge import Sides
from comparisons.layers._capture import flax_interceptor, torch_hooks
from comparisons.layers._records import Call
from comparisons.runs import RunInputs, output_tree


@dataclasses.dataclass(frozen=True)
class Forward:
    """One side's forward: its recorded calls (torch layout for torch) and its output as a tree."""

    calls: list[Call]
    output: Any


def build(run: RunInputs, dtype: str) -> tuple[Any, Any, dict]:
    """The pair built afresh in `dtype` (its own torch module and Flax variables, never the runs' ones)."""
    return run.pair.build(seed=run.config.seed, dtype=np.dtype(dtype))


def torch_forward(run: RunInputs, module: Any, inputs: tuple[np.ndarray, ...]) -> Forward:
    """`module(*inputs)` on the CPU in training mode, every mapped layer hooked."""
    import torch

    x = tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in inputs)
    with torch.no_grad(), torch_hooks(module, run.pair.mapping) as calls:
        output = module.train()(*x)
    return Forward(list(calls), output_tree(output))


def flax_forward(run: RunInputs, flax_module: Any, variables: dict, inputs: tuple[np.ndarray, ...]) -> Forward:
    """The Flax module applied eagerly (op by op, so each layer's values are visible) in training mode."""
    import jax

    pair = run.pair
    mutable = ["batch_stats"] if pair.has_batch_stats else False
    with jax.default_matmul_precision("highest"), flax_interceptor(pair.mapping) as calls:
        output = flax_module.apply(variables, *pair.to_flax_inputs(inputs), train=True, mutable=mutable)
    return Forward(list(calls), output_tree(jax.device_get(output[0] if mutable else output)))


def forwards(run: RunInputs, dtype: str) -> Sides:
    """The torch and the Flax `Forward` in `dtype` on the run's inputs (cast when `dtype` is wider)."""
    import jax

    from comparisons.runs.torch_run import torch_default_dtype

    def cast(x):
        return x.astype(dtype) if np.issubdtype(np.asarray(x).dtype, np.floating) else x
    inputs = tuple(cast(x) for x in run.inputs)
    torch_module, flax_module, variables = build(run, dtype)
    with torch_default_dtype(dtype):  # a float64 forward builds its masks in float64 (runs/torch_run.py)
        torch_side = torch_forward(run, torch_module, inputs)
    with jax.enable_x64(dtype == "float64"):
        flax_side = flax_forward(run, run.pair.jax_side.computing_in(flax_module, dtype), variables, inputs)
    return Sides(torch_side, flax_side)
