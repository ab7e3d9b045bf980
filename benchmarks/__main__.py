"""Ratio benchmarks of dp_torch and dp_jax: print the tables, write JSON and, when asked, docs/performance.md.

A full run writes benchmarks/results.json; docs/performance.md only with --write-docs. A --quick run
(a smoke test) writes nothing in the repository unless told where, and never a page under docs/.
JAX's devices are configured here, before JAX initialises (8 emulated CPU devices by default).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from benchmarks.runner import MODULES, run

ROOT = Path(__file__).resolve().parents[1]
DOCS_PAGE = ROOT / "docs" / "performance.md"
RESULTS = ROOT / "benchmarks" / "results.json"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu",
                        help="cpu: 8 emulated JAX CPU devices (default); gpu: CUDA torch + JAX GPU")
    parser.add_argument("--quick", action="store_true", help="tiny sizes and repetitions (smoke test)")
    parser.add_argument("--json", type=Path, default=None,
                        help="where to write the results (default benchmarks/results.json for a full run; "
                             "a --quick run writes JSON only where this says)")
    parser.add_argument("--write-docs", type=Path, nargs="?", const=DOCS_PAGE, default=None, metavar="PAGE",
                        help=f"regenerate the Markdown page (default {DOCS_PAGE.relative_to(ROOT)}); a --quick "
                             "run may write a page only outside docs/")
    parser.add_argument("--only", nargs="+", choices=list(MODULES), default=list(MODULES),
                        help="run only these sections")
    args = parser.parse_args(argv)
    if args.json is None and not args.quick:
        args.json = RESULTS
    if args.quick and args.write_docs is not None and (ROOT / "docs") in args.write_docs.resolve().parents:
        parser.error(f"--quick --write-docs {args.write_docs}: a --quick run's figures are a smoke test, not "
                     "measurements, and never go into docs/; drop --quick, or write the page elsewhere")
    return args


def configure_jax_devices(device: str) -> None:
    """Before JAX initialises: 8 emulated CPU devices, or the GPU platform."""
    from benchmarks.context import EMULATED_CPU_DEVICES

    if device == "gpu":  # torch shares the GPU: JAX must not grab 75% of its memory up front
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    if device == "cpu":
        os.environ["JAX_PLATFORMS"] = "cpu"
        flags = os.environ.get("XLA_FLAGS", "")
        if "xla_force_host_platform_device_count" not in flags:
            os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={EMULATED_CPU_DEVICES}"
    import jax

    if device == "cpu":
        jax.config.update("jax_num_cpu_devices", EMULATED_CPU_DEVICES)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configure_jax_devices(args.device)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
