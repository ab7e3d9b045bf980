"""`python -m comparisons run --torch TARGET --input-shape 3,5,5`: a torch model with no Flax twin, its JAX
side traced by torchax. TARGET is `package.module:factory` or `path/to/file.py:factory` (as for `doctor`)."""
from __future__ import annotations

import argparse
from typing import Any

from comparisons.doctor.cli import BATCH_MARK
from comparisons.errors import UsageError

DEFAULT_LOSS = "comparisons.traced.cli:mean_square"


def add_arguments(run: argparse.ArgumentParser) -> None:
    run.add_argument("--torch", metavar="TARGET", help="your torch model with no Flax twin: package.module:factory "
                     "or path/to/file.py:factory; the JAX side is its trace by torchax (needs dp-compare[auto])")
    run.add_argument("--input-shape", action="append", metavar="SHAPE", default=[],
                     help="with --torch: one input's shape without the batch, e.g. 3,32,32, or with B in the "
                          "batch's place, B,3,32,32 (the form doctor takes too); repeatable")
    run.add_argument("--int-inputs", type=int, metavar="HIGH",
                     help="with --torch: integer inputs (token ids) drawn from 0..HIGH-1 instead of normal floats")
    run.add_argument("--loss", metavar="MODULE:FUNCTION", default=DEFAULT_LOSS,
                     help="with --torch: loss_torch(output, targets); default: the mean square of every float output")


TORCH_ONLY_FLAGS = (("input_shape", [], "--input-shape"), ("int_inputs", None, "--int-inputs"),
                    ("loss", DEFAULT_LOSS, "--loss"))


def refuse_without_torch(args: argparse.Namespace) -> None:
    """--input-shape, --int-inputs and --loss describe a --torch model: refused by name without one."""
    given = [flag for name, default, flag in TORCH_ONLY_FLAGS if getattr(args, name, default) != default]
    if given and getattr(args, "torch", None) is None:
        raise UsageError(f"run: {', '.join(given)} only describe{'s' if len(given) == 1 else ''} a --torch model "
                         "and would be ignored; drop them, or pass --torch TARGET")


def pair_from_args(args: argparse.Namespace) -> Any:
    """The TracedPair the --torch flags describe (refused with the flag to fix when they do not fit)."""
    from comparisons.doctor.cli import load
    from comparisons.traced.pair import pair_from_torch

    if args.model is not None or args.pairs:
        raise UsageError("run: --torch takes the place of --model and --pair; pass one of them")
    if not args.input_shape:
        raise UsageError("run --torch: give each input's shape without the batch, e.g. --input-shape 3,32,32")
    if args.int_inputs is not None and args.int_inputs < 1:
        raise UsageError(f"--int-inputs {args.int_inputs}: pass the number of ids, e.g. --int-inputs 100")
    load(args.loss, "--loss")  # a wrong target fails here, before any work
    shapes = [_shape(text) for text in args.input_shape]
    return pair_from_torch(args.torch, make_inputs=_random_inputs(shapes, args.int_inputs), loss_torch=args.loss,
                           name=args.torch)


def _shape(text: str) -> tuple[int, ...]:
    dims = [n for n in text.split(",") if n.strip()]
    if dims and dims[0].strip() == BATCH_MARK:
        dims = dims[1:]
    try:
        shape = tuple(int(n) for n in dims)
    except ValueError as error:
        raise UsageError(f"--input-shape {text}: {error}; shapes look like 3,32,32 (without the batch)") from None
    if min(shape, default=1) < 1:
        raise UsageError(f"--input-shape {text}: dims must be positive integers; shapes look like 3,32,32")
    return shape


def _random_inputs(shapes: list[tuple[int, ...]], high: int | None):
    """make_inputs(batch, seed, dtype): one array per shape (batch first) and zero targets."""
    import numpy as np

    def make_inputs(batch: int, seed: int, dtype: Any):
        rng = np.random.default_rng(seed)
        inputs = tuple(rng.integers(0, high, (batch, *shape)).astype(np.int64) if high is not None
                       else rng.standard_normal((batch, *shape)).astype(dtype) for shape in shapes)
        return inputs, np.zeros((batch,), dtype)
    return make_inputs


def mean_square(output: Any, targets: Any) -> Any:
    """The default loss: the mean square of every floating-point tensor in the output (targets unused)."""
    import torch
    from torch.utils._pytree import tree_leaves

    leaves = [leaf for leaf in tree_leaves(output) if isinstance(leaf, torch.Tensor) and leaf.is_floating_point()]
    if not leaves:
        raise UsageError("the default loss needs a floating-point output; pass --loss MODULE:FUNCTION")
    return sum(leaf.pow(2).mean() for leaf in leaves)
