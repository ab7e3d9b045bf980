"""Where the time goes when a target is missed: `python -m benchmarks.profiles NAME [--top N]`.

NAME is one of PROFILES: each builds one workload from the benchmark, runs it under cProfile
and prints the functions with the most own time, so a finding in docs/performance.md can be
re-checked. `harness-compiles` lists the XLA compiles of a second (warm) demo run instead.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import cProfile
import io
import logging
import pstats
import runpy
import sys
from collections.abc import Callable
from typing import Any

from dp_jax import STRATEGIES

WIDTH, BATCH, DEVICES = 64, 128, 4


def jax_workload(strategy: str, grad: bool) -> Callable[[], Any]:
    """dp_jax DataParallel forward, or eager jax.grad of a loss on its output, on 4 devices."""
    import jax

    import dp_jax
    from benchmarks.jax_strategies import loss_of
    from benchmarks.models import batch, flax_mlp

    model, devices = flax_mlp(WIDTH), jax.devices()[:DEVICES]
    x = jax.device_put(batch(BATCH, WIDTH), devices[0])
    variables = jax.device_put(model.init(jax.random.key(0), x), devices[0])
    dp = dp_jax.DataParallel(model, device_ids=devices, strategy=strategy)
    if grad:
        step = jax.grad(lambda v, x: loss_of(dp.apply(v, x)))
        return lambda: jax.block_until_ready(step(variables, x))
    return lambda: jax.block_until_ready(dp.apply(variables, x))


def torch_workload(step: str) -> Callable[[], Any]:
    """dp_torch scatter or gather of the benchmark's batch on "cpu" x 4."""
    import torch

    import dp_torch

    devices = [torch.device("cpu")] * DEVICES
    x = torch.randn(BATCH, WIDTH)
    if step == "scatter":
        return lambda: dp_torch.scatter((x,), devices)
    outputs = [torch.randn(BATCH // DEVICES, 10) for _ in range(DEVICES)]
    return lambda: dp_torch.gather(outputs, devices[0])


PROFILES: dict[str, Callable[[], Callable[[], Any]]] = {
    **{f"jax-{s}-fwd": (lambda s=s: jax_workload(s, grad=False)) for s in ("explicit", "sharded")},
    **{f"jax-{s}-grad": (lambda s=s: jax_workload(s, grad=True)) for s in STRATEGIES},
    "torch-scatter": lambda: torch_workload("scatter"),
    "torch-gather": lambda: torch_workload("gather"),
}


def profile(workload: Callable[[], Any], calls: int, top: int) -> None:
    for _ in range(3):
        workload()  # compiles and caches happen here, not in the profile
    profiler = cProfile.Profile()
    profiler.runcall(lambda: [workload() for _ in range(calls)])
    stats = pstats.Stats(profiler)
    print(f"{calls} calls, {stats.total_tt / calls * 1e3:.2f} ms per call under the profiler")
    stats.sort_stats("tottime").print_stats(top)


def warm_demo_compiles() -> None:
    """Run `python -m comparisons demo` twice here and list what the second run compiles again."""
    import jax

    jax.config.update("jax_log_compiles", True)
    compiled: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            message = record.getMessage()
            if message.startswith("Compiling "):
                compiled.append(message.split(" with ")[0][len("Compiling "):])

    logging.getLogger("jax").addHandler(Collect())
    for run in ("cold", "warm"):
        before = len(compiled)
        sys.argv = ["comparisons", "demo", "--out", "/dev/null"]
        with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
            runpy.run_module("comparisons", run_name="__main__", alter_sys=True)
        print(f"{run}: {len(compiled) - before} compiles")
        for name, count in collections.Counter(compiled[before:]).most_common():
            print(f"  {count} x {name}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profiles", description=__doc__.splitlines()[0])
    parser.add_argument("name", choices=[*PROFILES, "harness-compiles"])
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--top", type=int, default=20)
    args = parser.parse_args(argv)
    from benchmarks.__main__ import configure_jax_devices

    configure_jax_devices("cpu")
    if args.name == "harness-compiles":
        warm_demo_compiles()
    else:
        profile(PROFILES[args.name](), args.calls, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
