"""Section 6: the virtual-devices helper's benchmark (benchmarks/bench_virtual.py), included as is.

It installs process-global torch state (the `vdev` backend), so it runs in its own interpreter;
its rows (vdev step time / CPU step time, alternating) become this section's rows.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.context import Context
from benchmarks.results import Section

SCRIPT = Path(__file__).resolve().parent / "bench_virtual.py"


def run(ctx: Context) -> Section:
    section = Section(
        "virtual", "Virtual torch devices (vdev) vs plain CPU",
        "t(MLP forward+backward step on vdev:1) / t(same step on cpu), from benchmarks/bench_virtual.py "
        "(owned by the virtual-devices work); median and min-max of its alternating repetitions",
    )
    if ctx.device == "gpu":
        section.unavailable = "CPU-only: virtual devices emulate accelerators on a CPU"
        return section
    if ctx.quick:
        section.unavailable = "skipped in --quick (a second torch interpreter would double the smoke test)"
        return section
    if not SCRIPT.exists():
        section.unavailable = "benchmarks/bench_virtual.py does not exist yet"
        return section
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "virtual.json"
        command = [sys.executable, str(SCRIPT), "--json", str(out)] + (["--quick"] if ctx.quick else [])
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        if done.returncode != 0 or not out.exists():
            tail = " / ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
            section.unavailable = f"bench_virtual.py failed (rc {done.returncode}): {tail}"
            return section
        measured = json.loads(out.read_text())
    for row in measured["rows"]:
        ratio = {"median": row["ratio_median"], "q1": None, "q3": None, "min": row["ratio_min"],
                 "max": row["ratio_max"], "a_s": row["vdev_ms"] / 1e3, "b_s": row["cpu_ms"] / 1e3,
                 "reps": row["reps"], "calls": row["steps_per_rep"]}
        section.rows.append({"labels": {"model": f"mlp{row['width']}", "batch": row["batch"]},
                             "ratio": ratio, "target": None})
    section.notes.append(f"torch {measured['torch']}, {measured['threads']} intra-op threads; no IQR "
                         "(bench_virtual.py reports median and min-max only)")
    return section
