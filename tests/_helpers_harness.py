"""Shared pieces for the comparisons harness tests: small reports drawn from a seed and a run of the CLI."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from _chunks import torch_chunk_sizes

from comparisons.placement import PlacementMap, PlacementRecord
from comparisons.verdicts import Check, ComparisonReport, Leaf

ROOT = Path(__file__).resolve().parents[1]


LAYER_NAMES = ("fc", "head", "dense_in", "proj", "out_layer")


def small_report(passed: bool = True, seed: int = 0) -> ComparisonReport:
    """A hand-made report drawn from `seed`: 1-4 devices, one linear layer of random name and size placed
    on each of them in torch and JAX, 1-4 passing checks and, unless `passed`, one failing gradient
    check (detail with HTML to escape) at a random position among them."""
    rng = np.random.default_rng(seed)
    devices = int(rng.integers(1, 5))
    layer = str(rng.choice(LAYER_NAMES))
    out_features, in_features = (int(n) for n in rng.integers(2, 9, size=2))
    placements = {
        "torch": PlacementMap(tuple(PlacementRecord(i, f"{layer}.weight", "param", "cpu", i,
                                                    (out_features, in_features), "float32", i == 0)
                                    for i in range(devices))),
        "jax:explicit": PlacementMap(tuple(PlacementRecord(i, f"params.{layer}.kernel", "param", f"cpu:{i}", i,
                                                           (in_features, out_features), "float32", i == 0)
                                           for i in range(devices))),
    }
    subjects = ("outputs", "batch_stats", "params_after_steps", "chunks")
    def passing(figure: float) -> Leaf:
        return Leaf(f"{layer}.bias", figure, figure, True, "data_parallel", atol=1e-6)

    checks = [Check(str(subject), "torch DP vs single", True, figure, 0.0, 1e-5, f"worst leaf {layer}",
                    (passing(figure),))
              for subject in rng.permutation(subjects)[:int(rng.integers(1, 5))]
              for figure in [float(rng.uniform(0, 1e-6))]]
    if not passed:
        figure = float(rng.uniform(1e-3, 9e-3))
        wrong = Leaf(f"{layer}.kernel", figure, figure, False, "port", atol=1e-6,
                     message=f"port: `{layer}.kernel`: |Δ| {figure:.3g} <b>")
        failing = Check("gradients", "torch DP vs jax:explicit DP", False, figure,
                        float(rng.uniform(1e-2, 9e-2)), 1e-5, f"1 of 2 leaves fail: {wrong.message}",
                        (wrong, passing(0.0)), "port")
        checks.insert(int(rng.integers(0, len(checks) + 1)), failing)
    batch = int(rng.integers(devices, 4 * devices + 1))
    return ComparisonReport(model=f"net_{seed}", batch_size=batch, devices=devices,
                            chunk_sizes=torch_chunk_sizes(batch, devices),
                            strategies=["explicit"], steps=1, optimizer="sgd", dtype="float32", seed=seed,
                            torch_devices="cpu",
                            tolerance={"rtol": 1e-5, "rtol_source": "default for float32", "atol": None,
                                       "atol_source": "derived per leaf", "float64_rtol": 1e-12},
                            precision="float64-check", checks=checks,
                            placements=placements, notes=["a note"], layers={layer: layer})


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -m comparisons *args` in a fresh process (its own JAX device count, its own torch)."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    return subprocess.run([sys.executable, "-m", "comparisons", *args], cwd=cwd or ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)
