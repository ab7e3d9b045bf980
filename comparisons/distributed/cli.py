"""`python -m comparisons run --processes P --devices D ...`: the multi-process comparison from the CLI.

comparisons/__main__.py parses the flags and renders the report; this module turns the parsed
flags into a `compare_distributed` call. A worker that fails or hangs ends the command with
status 3 and one message naming the side, the rank and its stderr.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

PROCESSES_HELP = (
    "run multi-process instead: PyTorch's DistributedDataParallel on P local ranks (gloo) and JAX on P "
    "processes (jax.distributed) x --devices CPU devices each, one global mesh, both checked against "
    "one-process DataParallel (dp_torch, dp_jax); any pair, a built-in one in the Flax API of --flax: the workers "
    "import what --pair / --import name "
    "(an installed package's pair: the module holding it); --batch defaults to 4 rows per JAX device and must split "
    "evenly over P x devices; exit status 3 when a worker fails or hangs (its rank and stderr are printed)")


def run_from_args(args: argparse.Namespace, argv: Sequence[str] | None, pair: str, bench_steps: dict[str, int]):
    """The ComparisonReport of `pair` for the parsed `run` flags; LaunchError -> message on stderr, SystemExit(3).
    `bench_steps`: {"bench_steps": N} when --bench-steps was given (checked: it needs --bench), else {}.

    The workers import what --import and --pair named (an entry point's pair: the module holding it)."""
    from comparisons.distributed.compare import compare_distributed
    from comparisons.distributed.ranks import LaunchError
    from comparisons.errors import ComparisonError

    if args.strategy:
        raise ComparisonError("run --processes: --strategy does not apply; the multi-process JAX side trains "
                              "through dp_jax's compiled step with strategy 'sharded' (drop --strategy)")
    if args.torch_devices != "auto":
        raise ComparisonError("run --processes: --torch-devices does not apply; each DDP rank uses one CPU "
                              "(drop --torch-devices)")
    _refuse_single_process_flags(args)
    batch = args.batch if _given("--batch", sys.argv[1:] if argv is None else argv) else None
    try:
        imports = [*(getattr(args, "imports", None) or ()), *(getattr(args, "pairs", None) or ())]
        return compare_distributed(pair, imports=imports, processes=args.processes, devices=args.devices,
                                   batch_size=batch, steps=args.steps, optimizer=args.optimizer, dtype=args.dtype,
                                   seed=args.seed, flax=args.flax, bench=args.bench, **bench_steps)
    except LaunchError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(3) from None


SINGLE_PROCESS_ONLY = (("rtol", None, "--rtol"), ("atol", None, "--atol"),
                       ("precision", "float64-check", "--precision"),
                       ("padding", False, "--padding"))


def _refuse_single_process_flags(args: argparse.Namespace) -> None:
    """--rtol, --atol, --precision and --padding set: refused by name, as the multi-process report would drop them."""
    from comparisons.errors import ComparisonError

    given = [flag for name, default, flag in SINGLE_PROCESS_ONLY if getattr(args, name, default) != default]
    if given:
        raise ComparisonError(f"run --processes: {', '.join(given)} {'does' if len(given) == 1 else 'do'} not apply: "
                              "the multi-process comparison judges with the default tolerances of --dtype and no "
                              f"float64 check or padding measure; drop {', '.join(given)}, or drop --processes to "
                              "run them in one process")


def _given(flag: str, argv: Sequence[str]) -> bool:
    """Whether `flag` is on the command line (argparse fills in its default otherwise)."""
    return any(a == flag or a.startswith(flag + "=") for a in argv)
