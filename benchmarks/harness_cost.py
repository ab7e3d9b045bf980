"""Section 4: what `python -m comparisons demo` costs, cold and warm, and how often it compiles.

cold: a fresh interpreter runs the demo once (imports, tracing and every XLA compile included).
warm: the same interpreter runs the demo a second time (modules imported, jit caches filled).
Both in one subprocess with JAX's persistent compilation cache off, so "cold" never reuses
compiles from an earlier run; a jax.monitoring listener counts backend compiles per run.
These are absolute wall times (they are the harness's own targets), so machine load inflates them.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.context import Context
from benchmarks.results import Section

ROOT = Path(__file__).resolve().parents[1]
MARK = "BENCH_JSON:"
TARGETS = {"cold": 30.0, "warm": 5.0}

# Runs in the subprocess: the CLI's module body twice via runpy, compiles counted per run.
PROBE = f"""
import contextlib, io, json, runpy, sys, time
started = time.perf_counter()
import jax
from jax import monitoring
compiles = []
monitoring.register_event_duration_secs_listener(
    lambda event, seconds, **_: compiles.append(seconds) if event.endswith("backend_compile_duration") else None)
runs = []
for _ in range(2):
    before, t0 = len(compiles), time.perf_counter()
    sys.argv = ["comparisons"] + sys.argv[1:]
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            runpy.run_module("comparisons", run_name="__main__", alter_sys=True)
        except SystemExit as exit:  # 0: every check passed, 1: a check failed (still a full run)
            code = exit.code or 0
            if code not in (0, 1):
                raise
        else:
            code = 0
    new = compiles[before:]
    runs.append({{"seconds": time.perf_counter() - t0, "compiles": len(new), "compile_seconds": sum(new),
                 "exit_code": code}})
runs[0]["seconds"] = time.perf_counter() - started - runs[1]["seconds"]  # cold includes the imports
print("{MARK}" + json.dumps(runs))
"""


def demo_runs(argv: list[str]) -> tuple[list[dict], float]:
    """[cold, warm] measurements from one subprocess, and the subprocess's own wall time."""
    # As a user types it: without the device flags this benchmark set for itself.
    env = {key: value for key, value in os.environ.items() if key not in ("XLA_FLAGS", "JAX_PLATFORMS")}
    env.update(JAX_ENABLE_COMPILATION_CACHE="false", PYTHONPATH=str(ROOT))
    with tempfile.TemporaryDirectory() as scratch:  # the demo writes report.html into its cwd
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", PROBE, *argv], cwd=scratch, env=env, capture_output=True,
                              text=True, timeout=600)
    wall = time.perf_counter() - started
    lines = [line for line in done.stdout.splitlines() if line.startswith(MARK)]
    if done.returncode != 0 or not lines:
        tail = " / ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        raise RuntimeError(f"`python -m comparisons {' '.join(argv)}` failed (rc {done.returncode}): {tail}")
    return json.loads(lines[-1][len(MARK):]), wall


def comparisons_missing() -> str | None:
    if not (ROOT / "comparisons" / "__main__.py").exists():
        return "comparisons/__main__.py does not exist yet"
    return None


def run(ctx: Context) -> Section:
    what = ("wall seconds of `python -m comparisons demo` (absolute, not a ratio): cold = fresh interpreter "
            "(imports included), warm = the demo again in that interpreter; persistent compilation cache off")
    section = Section("harness", "Harness: `python -m comparisons demo` cold and warm", what)
    if ctx.quick:
        section.unavailable = "skipped in --quick (the demo alone takes longer than a smoke test may)"
        return section
    if missing := comparisons_missing():
        section.unavailable = missing
        return section
    runs, wall = demo_runs(["demo"])
    if any(measured["exit_code"] for measured in runs):
        section.notes.append("the demo exited 1 (a comparison check failed); its time still counts")
    for name, measured in zip(("cold", "warm"), runs):
        section.rows.append({"labels": {"run": name, "figure": "wall time"}, "value": measured["seconds"],
                             "unit": "s", "target": TARGETS[name]})
        section.rows.append({"labels": {"run": name, "figure": "XLA compiles"}, "value": measured["compiles"],
                             "unit": f"({measured['compile_seconds']:.1f} s compiling)"})
    section.notes.append(f"subprocess wall time including interpreter start: {wall:.1f} s; "
                         f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    return section
