"""`python -m comparisons demo | run | list`: compare dp_torch and dp_jax from the command line.

Exit status: 0 when every check passes, 1 when one fails, 2 on bad input (message on stderr).
JAX's emulated CPU device count is set here, before JAX initialises.
"""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from comparisons.distributed.cli import PROCESSES_HELP
from comparisons.harness import STRATEGIES, TORCH_DEVICES
from comparisons.render import FORMATS

DEMO = {"pair": "cnn_bn", "batch_size": 10, "devices": 4, "steps": 2}


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "list":
        return _list()
    if args.command == "demo":
        settings = dict(DEMO, strategies=None, optimizer="sgd", dtype="float32", seed=0, torch_devices="auto")
        fmt, out, html_out = "table", None, args.out
    else:
        settings = dict(pair=args.model, batch_size=args.batch, devices=args.devices,
                        strategies=_strategy_list(args.strategy), steps=args.steps, optimizer=args.optimizer,
                        dtype=args.dtype, seed=args.seed, torch_devices=args.torch_devices)
        fmt, out, html_out = args.format, args.out, None
    try:
        report = (_run_distributed(args, argv) if getattr(args, "processes", None) is not None \
            else _run(settings))
    except ValueError as error:  # ComparisonError, ConversionError and the backends' refusals
        print(f"error: {error}", file=sys.stderr)
        return 2
    try:
        _emit(report, fmt, out)
        if html_out is not None:
            _write(html_out, report.render("html"))
    except OSError as error:
        print(f"error: cannot write the report: {error}", file=sys.stderr)
        return 2
    return 0 if report.ok else 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m comparisons",
                                     description="Compare dp_torch and dp_jax on a model pair.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="list the model pairs and strategies")
    demo = commands.add_parser("demo", help="cnn_bn, batch 10 on 4 devices; table + report.html")
    demo.add_argument("--out", default="report.html", help="HTML report path (default report.html)")
    run = commands.add_parser("run", help="one comparison with your settings")
    run.add_argument("--model", required=True, help="model pair name (see `list`)")
    run.add_argument("--devices", type=int, default=4, help="number of devices (default 4)")
    run.add_argument("--batch", type=int, default=10, help="global batch size (default 10)")
    run.add_argument("--strategy", action="append", metavar="S",
                     help=f"dp_jax strategy: {', '.join(STRATEGIES)}; repeatable or a comma list "
                          "(default: every strategy that can run this batch)")
    run.add_argument("--steps", type=int, default=2, help="optimizer steps (default 2)")
    run.add_argument("--dtype", default="float32", help="float32 or float64 (default float32)")
    run.add_argument("--optimizer", default="sgd", help="sgd, momentum or adam (default sgd)")
    run.add_argument("--seed", type=int, default=0, help="weights and inputs seed (default 0)")
    run.add_argument("--torch-devices", default="auto", choices=("auto", *TORCH_DEVICES),
                     help="torch replicas on 'cpu' repeated, virtual vdev:i, or CUDA; 'auto' (default): "
                          "CUDA if it has --devices GPUs, else virtual")
    run.add_argument("--format", default="table", choices=FORMATS, help="output format (default table)")
    run.add_argument("--out", help="write the report here instead of stdout")
    run.add_argument("--processes", type=int, metavar="P", help=PROCESSES_HELP)
    return parser


def _strategy_list(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    return [s.strip() for value in values for s in value.split(",") if s.strip()]


def _list() -> int:
    from comparisons import models

    for name in models.names():
        print(f"{name:<20} {models.get(name).description}")
    print(f"strategies: {', '.join(STRATEGIES)}")
    return 0


def _run(settings: dict):
    devices = settings["devices"]
    _set_jax_cpu_devices(max(8, devices) if isinstance(devices, int) else 8)
    settings["torch_devices"] = _torch_device_kind(settings["torch_devices"], devices)
    if settings["torch_devices"] == "virtual" and isinstance(devices, int) and devices > 0:
        from dp_torch import virtual

        virtual.install(devices)  # process-global, which is fine: the CLI is its own process
    from comparisons.harness import compare
    from comparisons.progress import progress_bar

    pair = settings.pop("pair")
    with progress_bar() as advance:
        return compare(pair, progress=advance, **settings)


def _torch_device_kind(kind: str, devices: int) -> str:
    """'auto' -> 'cuda' when torch sees `devices` GPUs, else 'virtual' (distinct vdev:i devices)."""
    if kind != "auto":
        return kind
    import torch

    return "cuda" if torch.cuda.device_count() >= devices else "virtual"


def _set_jax_cpu_devices(count: int) -> None:
    """JAX reads its CPU device count once, at first use; set it before that (unless the user did)."""
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" in flags:
        return
    os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={count}".strip()
    import jax

    jax.config.update("jax_num_cpu_devices", count)


def _run_distributed(args: argparse.Namespace, argv: Sequence[str] | None):
    """DDP and multi-process JAX (comparisons.distributed); a failed worker exits with status 3."""
    from comparisons.distributed.cli import run_from_args

    return run_from_args(args, argv)


def _emit(report, fmt: str, out: str | None) -> None:
    """The report as `fmt` on stdout (the table in colour on a terminal), or into the file `out`."""
    from rich.console import Console

    from comparisons.render import print_table

    if out is not None:
        _write(out, report.render(fmt))
    elif fmt == "table":
        print_table(report, Console())
    else:
        sys.stdout.write(report.render(fmt) + "\n")


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as file:
        file.write(text)
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
