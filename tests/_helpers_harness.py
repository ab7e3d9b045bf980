"""Shared pieces for the comparisons harness tests: a small report and a run of the CLI."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from comparisons.placement import PlacementMap, PlacementRecord
from comparisons.report import Check, ComparisonReport

ROOT = Path(__file__).resolve().parents[1]


def small_report(passed: bool = True) -> ComparisonReport:
    """A hand-made report: two checks, one torch and one JAX placement record per device."""
    placements = {
        "torch": PlacementMap(tuple(PlacementRecord(i, "fc.weight", "param", "cpu", i, (4, 3), "float32",
                                                    i == 0) for i in range(2))),
        "jax:explicit": PlacementMap(tuple(PlacementRecord(i, "params.fc.kernel", "param", f"cpu:{i}", i,
                                                           (3, 4), "float32", i == 0) for i in range(2))),
    }
    checks = [Check("outputs", "torch DP vs single", True, 0.0, 0.0, 1e-5, "worst leaf out"),
              Check("gradients", "torch DP vs jax:explicit DP", passed, 3e-3, 2e-2, 1e-5,
                    "worst leaf fc.kernel <b>")]
    return ComparisonReport(model="mlp", batch_size=3, devices=2, chunk_sizes=[2, 1], strategies=["explicit"],
                            steps=1, optimizer="sgd", dtype="float32", seed=0, torch_devices="cpu",
                            tolerance={"max_abs": 1e-5, "rel_norm": 1e-5}, checks=checks,
                            placements=placements, notes=["a note"], layers={"fc": "fc"})


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -m comparisons *args` in a fresh process (its own JAX device count, its own torch)."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    return subprocess.run([sys.executable, "-m", "comparisons", *args], cwd=cwd or ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)
