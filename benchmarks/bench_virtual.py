"""Overhead of virtual devices (vdev) vs plain CPU for an MLP forward+backward step.

    python benchmarks/bench_virtual.py [--quick] [--reps 9] [--threads 1] [--json FILE] [--profile]

A and B alternate within one run (CPU step, vdev step, CPU step, ...), so machine noise hits
both; the table shows per-step medians and the median vdev/CPU ratio with its min-max spread.
"""
from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from dp_torch import virtual  # noqa: E402

FULL = {"widths": (64, 256, 1024), "reps": 9, "steps": 5}
QUICK = {"widths": (16, 32), "reps": 2, "steps": 1}


def batch_for(width: int) -> int:
    return max(4, width // 4)


def make_mlp(width: int) -> nn.Module:
    return nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                         nn.Linear(width, 10))


def step(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> None:
    model.zero_grad(set_to_none=True)
    F.cross_entropy(model(x), y).backward()


def time_steps(model, x, y, steps: int) -> float:
    """Seconds per step, averaged over `steps` consecutive steps."""
    start = time.perf_counter()
    for _ in range(steps):
        step(model, x, y)
    return (time.perf_counter() - start) / steps


def measure(width: int, reps: int, steps: int) -> dict:
    torch.manual_seed(width)
    cpu_model = make_mlp(width)
    v_model = make_mlp(width).to(virtual.devices()[1])
    v_model.load_state_dict(cpu_model.state_dict())
    x, y = torch.randn(batch_for(width), width), torch.randint(0, 10, (batch_for(width),))
    vx, vy = x.to(virtual.devices()[1]), y.to(virtual.devices()[1])
    step(cpu_model, x, y), step(v_model, vx, vy)  # warm-up
    cpu_s, v_s = [], []
    for _ in range(reps):
        cpu_s.append(time_steps(cpu_model, x, y, steps))
        v_s.append(time_steps(v_model, vx, vy, steps))
    ratios = [v / c for v, c in zip(v_s, cpu_s)]
    return {"width": width, "batch": batch_for(width), "reps": reps, "steps_per_rep": steps,
            "cpu_ms": 1e3 * statistics.median(cpu_s), "vdev_ms": 1e3 * statistics.median(v_s),
            "ratio_median": statistics.median(ratios), "ratio_min": min(ratios),
            "ratio_max": max(ratios)}


def print_table(rows: list[dict], threads: int) -> None:
    print(f"torch {torch.__version__}, {threads} intra-op thread(s); "
          "one step = zero_grad + forward + cross_entropy + backward")
    print(f"{'width':>6} {'batch':>6} {'cpu ms':>9} {'vdev ms':>9} {'ratio':>7}  spread")
    for r in rows:
        print(f"{r['width']:>6} {r['batch']:>6} {r['cpu_ms']:>9.3f} {r['vdev_ms']:>9.3f} "
              f"{r['ratio_median']:>6.2f}x  {r['ratio_min']:.2f}-{r['ratio_max']:.2f}")


def profile_dispatch(width: int, steps: int = 20, top: int = 12) -> None:
    """Prints where a vdev step spends its Python time (cProfile, by own time)."""
    model = make_mlp(width).to(virtual.devices()[1])
    x = torch.randn(batch_for(width), width, device=virtual.devices()[1])
    y = torch.randint(0, 10, (batch_for(width),), device=virtual.devices()[1])
    profiler = cProfile.Profile()
    profiler.runcall(lambda: [step(model, x, y) for _ in range(steps)])
    pstats.Stats(profiler).sort_stats("tottime").print_stats(top)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test")
    parser.add_argument("--reps", type=int, help="A/B repetitions (default 9; quick 2)")
    parser.add_argument("--json", type=Path, help="also write the rows to this JSON file")
    parser.add_argument("--profile", action="store_true", help="cProfile a width-64 vdev step")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads (default 1: steadier on shared machines)")
    args = parser.parse_args(argv)
    config = QUICK if args.quick else FULL
    virtual.install()
    threads_before = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        rows = [measure(w, args.reps or config["reps"], config["steps"])
                for w in config["widths"]]
        if args.profile:
            profile_dispatch(64)
    finally:
        torch.set_num_threads(threads_before)
    print_table(rows, args.threads)
    if args.json:
        args.json.write_text(json.dumps({"torch": torch.__version__, "threads": args.threads,
                                         "rows": rows}, indent=2))
    return rows

if __name__ == "__main__":
    main()
