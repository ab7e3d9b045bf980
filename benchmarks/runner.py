"""Run the chosen sections, print their tables, write JSON and the Markdown page."""
from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
import traceback
from typing import Any

from benchmarks import docs_page, report
from benchmarks.context import Context, settings_for
from benchmarks.machine import describe
from benchmarks.results import Section

MODULES = {
    "jax_strategies": "benchmarks.jax_strategies",
    "torch_stock": "benchmarks.torch_stock",
    "train_step": "benchmarks.train_step",
    "nnx_train_step": "benchmarks.nnx_step",
    "breakdown": "benchmarks.breakdown",
    "replication": "benchmarks.replication",
    "harness": "benchmarks.harness_cost",
    "virtual": "benchmarks.virtual_table",  # runs bench_virtual.py in its own interpreter
}

# The only reasons a section may give for measuring nothing. Any other reason (a crash, a
# failed subprocess) fails the run: it still writes what it measured, then exits 1.
UNAVAILABLE_BECAUSE = (
    "skipped in --quick",   # too slow for a smoke test
    "CPU-only",             # asked for --device gpu
    "does not exist yet",   # the code it measures is not in this checkout
)


def gpu_missing() -> str | None:
    import jax
    import torch

    if not torch.cuda.is_available():
        return "torch.cuda.is_available() is False"
    try:
        jax.devices("gpu")
    except RuntimeError as error:
        return f"JAX has no GPU backend ({error})"
    return None


def use_one_torch_thread() -> None:
    """One intra-op thread per torch op on CPU.

    parallel_apply runs one Python thread per replica; with torch's default of one OpenMP
    thread per core each of them starts its own team, so 4 replicas oversubscribe 2 cores and
    the same step varied 10x between repetitions (median vs min) in our trials.
    """
    import torch

    torch.set_num_threads(1)


def load_average() -> str:
    return f"{os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else "n/a"


def run_section(section_id: str, ctx: Context) -> dict[str, Any]:
    """Run one section here; a crash is recorded under "crashed" (never as "unavailable")."""
    module_name = MODULES[section_id]
    started = time.perf_counter()
    try:
        section: Section = importlib.import_module(module_name).run(ctx)
        result = section.as_dict()
    except Exception as error:
        traceback.print_exc()
        crash = f"{type(error).__name__}: {error}"
        result = Section(section_id, section_id, "", notes=[f"crashed: {crash}"]).as_dict()
        result["crashed"] = crash
    result["seconds"] = round(time.perf_counter() - started, 1)
    return result


def failures(sections: list[dict[str, Any]]) -> list[str]:
    """One line per section that crashed or gave a reason outside UNAVAILABLE_BECAUSE."""
    found = []
    for section in sections:
        if section.get("crashed"):
            found.append(f"section {section['id']!r} crashed: {section['crashed']}")
        elif section["unavailable"] and not section["unavailable"].startswith(UNAVAILABLE_BECAUSE):
            found.append(f"section {section['id']!r} measured nothing: {section['unavailable']} "
                         f"(not one of the named reasons {UNAVAILABLE_BECAUSE})")
    return found


def run(args: argparse.Namespace) -> int:
    if args.device == "gpu" and (missing := gpu_missing()):
        print(f"--device gpu: no GPU here ({missing}); run without --device gpu for the CPU benchmarks",
              file=sys.stderr)
        return 2
    load_before = load_average()
    if args.device == "cpu":
        use_one_torch_thread()
    ctx = Context(device=args.device, quick=args.quick, settings=settings_for(args.quick))
    results: dict[str, Any] = {"machine": describe(args.device), "quick": args.quick,
                               "settings": ctx.settings.__dict__, "sections": []}
    for section_id in args.only:
        print(f"[benchmarks] {section_id} ...", file=sys.stderr, flush=True)
        section = run_section(section_id, ctx)
        results["sections"].append(section)
        print(report.section_markdown(section), flush=True)
    results["machine"]["load average"] = f"{load_before} at start, {load_average()} at end (1-minute)"
    if args.json is not None:
        report.write_json(results, args.json)
        print(f"[benchmarks] wrote {args.json}", file=sys.stderr)
    if args.write_docs is not None:
        docs_page.write(results, args.write_docs)
        print(f"[benchmarks] wrote {args.write_docs}", file=sys.stderr)
    for line in (failed := failures(results["sections"])):
        print(f"[benchmarks] FAILED: {line}", file=sys.stderr)
    return 1 if failed else 0
