"""`python -m comparisons demo | run | list | doctor`: compare dp_torch and dp_jax; check a user's model.

Exit status: 0 when every check passes, 1 when one fails, 2 on bad input (a `UsageError`: its message
alone on stderr; an error raised inside the user's own code too, named with their file and line), 3 when a
multi-process worker fails, 70 on an internal error (any other exception: a bug of ours, shown with its traceback),
130 on Ctrl-C (no report file is left behind).
Pairs from user code: `--pair module:NAME`, `--import module`, and the entry-point group
`dp_compare.pairs` (comparisons/models/user_pairs.py, which the multi-process workers use too).
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import threading
import traceback
from collections.abc import Sequence
from pathlib import Path

from comparisons import runs
from comparisons.distributed.cli import PROCESSES_HELP
from comparisons.doctor import cli as doctor_cli
from comparisons.errors import UsageError, blame_user_code
from comparisons.harness import STRATEGIES
from comparisons.render import FORMATS
from comparisons.runs import (
    COMPILE_CACHE_ENV,
    TORCH_DEVICES,
    no_cuda_reason,
    set_jax_cpu_devices,
    torch_kind,
)
from comparisons.traced import cli as traced_cli

INTERNAL_ERROR = 70  # EX_SOFTWARE in sysexits.h
DEMO_PAIR = "cnn_bn"  # at batch 10 on 4 devices, 2 steps: the Settings defaults


_partial: list[str] = []  # the temporary file a report is being written to, while it is


def main(argv: Sequence[str] | None = None) -> int:
    catch = threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) not in (
        signal.SIG_IGN, None)
    previous = signal.signal(signal.SIGINT, _interrupted) if catch else None
    try:
        return _main(argv)
    except KeyboardInterrupt:  # only where the handler could not be installed
        print("interrupted (Ctrl-C): no report written", file=sys.stderr)
        return 130
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def _interrupted(signum: int, frame) -> None:
    """Ctrl-C: one line and exit 130 at once. A KeyboardInterrupt would be swallowed where it lands in a
    garbage-collection callback (JAX has one) or abort inside native code; exiting now cannot be."""
    for path in _partial:
        Path(path).unlink(missing_ok=True)
    sys.stderr.write("interrupted (Ctrl-C): no report written\n")
    sys.stderr.flush()
    os._exit(130)


def _main(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    if getattr(args, "compile_cache", None):  # for this process and the workers it starts
        os.environ[COMPILE_CACHE_ENV] = args.compile_cache
    if args.command == "doctor":  # its own exit codes and formats: comparisons/doctor/cli.py
        return doctor_cli.run(args)
    try:
        if args.command == "run":
            traced_cli.refuse_without_torch(args)
        pair = _load_user_pairs(args)
        if getattr(args, "torch", None) is not None:
            pair = traced_cli.pair_from_args(args)
        if args.command == "list":
            return _list()
        if args.command == "demo":
            named, fmt, out, html_out = DEMO_PAIR, "table", None, args.out
        else:
            named = pair if args.torch else _model_name(args, pair)
            fmt, out, html_out = args.format, args.out, None
        named = _in_flax_api(named, args)
        for path in (out, html_out):
            if path is not None:
                _check_writable(path, "--out")
        if getattr(args, "processes", None) is not None and getattr(args, "layers", False):
            raise UsageError("run: --layers with --processes is not supported: the layer view runs in one "
                             "process; drop --processes to see it")
        report = (_run_distributed(args, argv, named) if getattr(args, "processes", None) is not None
                  else _run(named, args))
    except _usage_errors() as error:  # ComparisonError, ConversionError, UserPairError, the backends' refusals
        print(f"error: {error}", file=sys.stderr)
        return 2
    except Exception as error:  # noqa: BLE001 (the user's code's error, or else ours: said, with the traceback)
        theirs = blame_user_code(error)
        if theirs is not None:
            fix = _fix_for(str(error), args, theirs.in_forward)
            print(f"error: {theirs}{'; ' + fix if fix else ''}", file=sys.stderr)
            return 2
        traceback.print_exc()
        print(f"internal error (exit {INTERNAL_ERROR}): the traceback above is a bug of dp-compare, not of your "
              "input; please report it", file=sys.stderr)
        return INTERNAL_ERROR
    try:
        emit(report, fmt, out)
        if html_out is not None:
            _write(html_out, report.render("html"))
    except OSError as error:
        print(f"error: cannot write the report: {error}", file=sys.stderr)
        return 2
    return 0 if report.ok else 1


def _fix_for(message: str, args: argparse.Namespace, in_forward: bool) -> str:
    """The fix of a known error of the user's model under these flags ('' when none is known)."""
    if "Expected more than 1 value per channel when training" in message and args.command == "run":
        return _one_row_chunk_fix(args.batch, args.devices)
    if in_forward and getattr(args, "torch", None) is not None:
        return ("check --input-shape (one flag per input of forward, each without the batch, e.g. 3,32,32) and "
                "--int-inputs (integer ids, for a model that takes them)")
    return ""


def _one_row_chunk_fix(batch: int, devices: int) -> str:
    """A BatchNorm in training fed a 1-row chunk: the batches and device counts whose chunks all hold 2+ rows."""
    def smallest_chunk(b: int, d: int) -> int:
        size = -(-b // d)  # torch.chunk: chunks of ceil(b / d) rows, the last one what is left
        return b - size * (-(-b // size) - 1)
    good_batch = next(b for b in range(max(batch, 2 * devices), 4 * (batch + devices))
                      if smallest_chunk(b, devices) >= 2)
    good_devices = [d for d in range(devices - 1, 0, -1) if smallest_chunk(batch, d) >= 2][:1]
    other = f", or --devices {good_devices[0]} with --batch {batch}" if good_devices else ""
    return (f"a BatchNorm in training mode got a 1-row chunk: --batch {batch} on --devices {devices} splits into "
            f"chunks with one row (stock DataParallel fails alike); pass --batch {good_batch}{other}")


def _usage_errors() -> tuple[type[Exception], ...]:
    """comparisons' UsageError and, once loaded, dp_torch's and dp_jax's: the backends cannot import comparisons
    nor each other, so each has its own base of the same name (evaluated when an error reaches `except`)."""
    loaded = (sys.modules.get(name) for name in ("dp_torch", "dp_jax"))
    return (UsageError, *(module.UsageError for module in loaded if module is not None))


def _load_user_pairs(args: argparse.Namespace):
    """Installed packages' pairs (entry points), then --import modules, then --pair objects (the last returned)."""
    from comparisons.models import user_pairs

    if getattr(args, "pairs", None) or getattr(args, "imports", None):
        # a user module may start JAX on import (transformers' Flax models do): give it its CPU devices first
        set_jax_cpu_devices(max(8, getattr(args, "devices", None) or 0))
        if getattr(args, "seed", None) is not None:  # as --processes' workers do: a pair made on import is alike
            from comparisons.distributed.pairs import seed_imports

            seed_imports(min(max(args.seed, 0), 2**32 - 1))  # a seed out of range is refused later, by name
    user_pairs.load_entry_points()
    for module in getattr(args, "imports", None) or ():
        user_pairs.import_module(module)
    pairs = [user_pairs.load_pair(spec) for spec in getattr(args, "pairs", None) or ()]
    return pairs[-1] if pairs else None


def _in_flax_api(named, args: argparse.Namespace):
    """The pair in the Flax API --flax asks for, refused now, naming --flax, when it cannot be (a pair of the user's
    own in another API). Under --processes the name goes on: the workers pick the twin again from --flax."""
    from comparisons.harness import model_pair
    from comparisons.models.builtin import in_flax_api

    chosen = in_flax_api(model_pair(named), args.flax, flag="--flax", caller=args.command)
    return chosen if getattr(args, "processes", None) is None else named


def _model_name(args: argparse.Namespace, pair) -> str:
    if args.model is not None:
        return args.model
    if pair is None:
        raise UsageError("run: name the model: --model NAME (see `list`), or --pair module:NAME for your own")
    return pair.name


def _check_cuda() -> None:
    reason = no_cuda_reason()
    if reason is not None:
        raise UsageError(f"--torch-devices cuda: {reason}; use --torch-devices auto (virtual devices vdev:i "
                         "without GPUs) or cpu")


def _check_writable(path: str, flag: str) -> None:
    """Refuse an --out the report could not be written to, before the comparison spends its time."""
    doctor_cli.check_writable(path, flag, "report.html")


def _add_run_arguments(run: argparse.ArgumentParser) -> None:
    """`run`'s own flags (the traced, doctor, pair and Flax flags are added beside it)."""
    run.add_argument("--model", help="model pair name (see `list`); default: the last --pair")
    run.add_argument("--devices", type=int, default=4, help="number of devices (default 4)")
    run.add_argument("--batch", type=int, default=10, help="global batch size (default 10)")
    run.add_argument("--strategy", action="append", metavar="S",
                     help=f"dp_jax strategy: {', '.join(STRATEGIES)}; repeatable or a comma list "
                          "(default: every strategy)")
    run.add_argument("--steps", type=int, default=2,
                     help="optimizer steps (default 2); with 2 or more the report shows the drift per step")
    run.add_argument("--padding", action="store_true",
                     help="also measure what padding the last chunk (a pmap port) would change: labelled "
                          "'padding' notes, never judged")
    run.add_argument("--layers", action="store_true",
                     help="show the layer view: every mapped layer torch beside Flax, the first divergence, each "
                          "replica against one device (added anyway when a torch-vs-JAX check fails)")
    run.add_argument("--dtype", default="float32", help="float32 or float64 (default float32)")
    run.add_argument("--precision", default="float64-check", choices=("float64-check", "off", "float64"),
                     help="float64-check (default): also run both frameworks single-device in float64 to tell a "
                          "port difference from rounding; off: the --dtype run alone; float64: everything in float64")
    run.add_argument("--rtol", type=float, help="element-wise relative tolerance of every leaf "
                                                "(default 1e-5 in float32, 1e-12 in float64)")
    run.add_argument("--atol", type=float, help="element-wise absolute tolerance of every leaf (default: derived per "
                                                "leaf from its measured rounding, docs/report_schema.md#leaves)")
    run.add_argument("--optimizer", default="sgd", help="sgd, momentum or adam (default sgd)")
    run.add_argument("--seed", type=int, default=0, help="weights and inputs seed (default 0)")
    run.add_argument("--torch-devices", default="auto", choices=("auto", *TORCH_DEVICES),
                     help="torch replicas on 'cpu' repeated, virtual vdev:i, or CUDA; 'auto' (default): "
                          "CUDA if it has --devices GPUs, else virtual")
    run.add_argument("--format", default="table", choices=FORMATS, help="output format (default table)")
    run.add_argument("--out", help="write the report here instead of stdout")
    run.add_argument("--processes", type=int, metavar="P", help=PROCESSES_HELP)
    run.add_argument("--bench", action="store_true", help="once every check has passed, time one training step of "
                                                          "every side (docs/performance.md): a table, and a chart "
                                                          "in the HTML; a failed check gives no figure; with "
                                                          "--processes, DDP beside multi-process JAX")
    run.add_argument("--bench-steps", type=int, metavar="N",
                     help="timed steps per side with --bench, interleaved (default 10)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m comparisons",
                                     description="Compare dp_torch and dp_jax on a model pair.")
    commands = parser.add_subparsers(dest="command", required=True)
    listing = commands.add_parser("list", help="list the model pairs and strategies")
    demo = commands.add_parser("demo", help="cnn_bn (its Flax NNX twin; --flax linen for linen's), batch 10 on 4 "
                                            "devices; table + report.html")
    demo.add_argument("--out", default="report.html", help="HTML report path (default report.html)")
    run = commands.add_parser("run", help="one comparison with your settings")
    _add_run_arguments(run)
    traced_cli.add_arguments(run)
    doctor_cli.add_arguments(commands.add_parser("doctor", help="check your own model for what DataParallel "
                                                 "will not put on each device", description=doctor_cli.DESCRIPTION))
    for command in (listing, run):
        command.add_argument("--pair", action="append", dest="pairs", metavar="MODULE:NAME",
                             help="your ModelPair object, e.g. my_package.pairs:MY_NET (repeatable; "
                                  "imported from PYTHONPATH or the current folder)")
        command.add_argument("--import", action="append", dest="imports", metavar="MODULE",
                             help="import MODULE first (it registers pairs with comparisons.models.register); "
                                  "repeatable")
    for command in (demo, run):
        command.add_argument("--flax", choices=("nnx", "linen"),
                             help="the Flax API of a built-in pair's JAX twin: nnx (default) or linen; a pair of "
                                  "your own (--pair, --import, --torch) runs in its own API")
        command.add_argument("--compile-cache", metavar="DIR|off",
                             help="JAX's persistent compilation cache folder, or 'off' (default: "
                                  f"${COMPILE_CACHE_ENV}, else ~/.cache/dp-compare/jax): a second run compiles nothing")
    return parser


def _strategy_list(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    return [s.strip() for value in values for s in value.split(",") if s.strip()]


def _list() -> int:
    from comparisons import models
    from comparisons.models.builtin import flax_apis

    print(f"{'pair':<20} {'flax':<12} description")
    for name in models.names():
        pair = models.get(name)
        print(f"{name:<20} {', '.join(flax_apis(pair)) or '-':<12} {pair.description}")
    print(f"strategies: {', '.join(STRATEGIES)}")
    return 0


def _settings(args: argparse.Namespace):
    """The comparison's Settings from the parsed flags (the demo's: every default), checked as they are made."""
    from comparisons.harness import Settings

    if args.command == "demo":
        return Settings(flax=args.flax)
    devices = args.devices
    if devices < 1:  # before Settings and the torch kind: their errors would not name the flag
        raise UsageError(f"--devices={devices}: pass a positive number of devices, e.g. --devices 4")
    return Settings(batch_size=args.batch, devices=devices, strategies=_strategy_list(args.strategy), steps=args.steps,
                    optimizer=args.optimizer, dtype=args.dtype, seed=args.seed, torch_devices=args.torch_devices,
                    padding=args.padding, precision=args.precision, rtol=args.rtol, atol=args.atol, layers=args.layers,
                    bench=args.bench, flax=args.flax, **_bench_steps(args))


def _bench_steps(args: argparse.Namespace) -> dict[str, int]:
    """{"bench_steps": --bench-steps} when given (else Settings' default), refused without --bench (it would
    time nothing) or below 1."""
    steps = args.bench_steps
    if steps is None:
        return {}
    if not args.bench:
        raise UsageError(f"--bench-steps {steps}: it counts the steps --bench times; add --bench")
    if steps < 1:
        raise UsageError(f"--bench-steps {steps}: pass a positive number of timed steps, e.g. --bench-steps 10")
    return {"bench_steps": steps}


def _run(pair, args: argparse.Namespace):
    """compare() on `pair` with the flags' Settings, its torch devices settled here (their errors name the flags)."""
    import dataclasses

    from comparisons.cli._progress import progress_bar
    from comparisons.harness import compare_settings

    settings = _settings(args)
    kind = torch_kind(settings.torch_devices, settings.devices)
    if kind == "cuda":
        _check_cuda()
    if kind == "virtual":  # process-global, which is fine: the CLI is its own process
        runs.install_virtual(settings.devices, argument="--devices", cpu_fix="--torch-devices cpu")
    with progress_bar() as advance:
        return compare_settings(pair, dataclasses.replace(settings, torch_devices=kind, progress=advance))


def _run_distributed(args: argparse.Namespace, argv: Sequence[str] | None, pair: str):
    """DDP and multi-process JAX (comparisons.distributed) on `pair`, whose --import / --pair targets the workers
    import too; a failed worker exits with status 3."""
    from comparisons.distributed.cli import run_from_args

    return run_from_args(args, argv, pair, _bench_steps(args))


def emit(report, fmt: str, out: str | None) -> None:
    """The report as `fmt` on stdout (the table in colour on a terminal), or into the file `out`.

    The table takes a terminal's width; with none (a pipe, CI even where it forces colour) it is as wide as
    it needs, so no row wraps."""
    from rich.console import Console

    from comparisons.render import print_table

    if out is not None:
        _write(out, report.render(fmt))
    elif fmt == "table":
        print_table(report, Console(), fit=not _is_terminal(sys.stdout))
    else:
        sys.stdout.write(report.render(fmt) + "\n")
    if fmt != "table":  # the verdicts on the terminal too, beside the report (not inside it)
        print(_summary(report), file=sys.stdout if out is not None else sys.stderr)


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or closed
        return False


def _summary(report) -> str:
    """Headline, each failed check, and "N/M checks passed": what the table's footer says."""
    from comparisons.render import headline

    passed = len(report.checks) - len(report.failures)
    lines = [headline(report), *(f"FAIL {c.subject} ({c.compared}): {c.detail}" for c in report.failures),
             f"{'OK' if report.ok else 'FAILED'}: {passed}/{len(report.checks)} checks passed"]
    return "\n".join(lines)


def _write(path: str, text: str) -> None:
    """Write `text` to `path`: a regular file (or a new path) whole or not at all, through a temporary file
    beside it renamed over it; a symlink's target the same way (pipes and devices are refused up front)."""
    target = Path(path).resolve() if Path(path).is_symlink() else Path(path)
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    _partial.append(temporary)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
        os.chmod(temporary, 0o644)  # mkstemp's 0600 would make the report private
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    finally:
        _partial.remove(temporary)
    print(f"wrote {path}", file=sys.stderr)
