"""compare_distributed: DDP on P ranks and JAX on P processes x D devices, beside one-process runs.

Both multi-process sides are started first (each P local processes), and the single-process
references run here while they work: dp_torch.DataParallel on P devices (DDP's chunks) and on
P x D (the JAX mesh's chunks), dp_jax.DataParallel on P x D JAX devices, and where they measure a
by-design difference, DataParallel with DDP's loss weighting and torch on the whole batch.
"""
from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from comparisons.distributed.config import WorkerConfig, chunk_rows
from comparisons.distributed.launcher import Launch
from comparisons.distributed.ranks import SIDES
from comparisons.errors import ComparisonError, positive_integer
from comparisons.harness import Settings
from comparisons.verdicts import ComparisonReport

if TYPE_CHECKING:
    from comparisons.models import ModelPair

CALLER = "compare_distributed"
WORKERS = {"torch": "comparisons.distributed.torch_worker", "jax": "comparisons.distributed.jax_worker"}


def compare_distributed(pair: str | ModelPair, *, processes: int = 2, devices: int = 2, batch_size: int | None = None,
                        steps: int = 2, optimizer: str = "sgd", dtype: str = "float32", seed: int = 0,
                        sides: Sequence[str] = SIDES, timeout: float = 120.0,
                        rendezvous_timeout: float = 60.0, imports: Sequence[str] = (),
                        flax: str | None = None, bench: bool = False, bench_steps: int = 10) -> ComparisonReport:
    """Run `pair` under DDP (P ranks) and multi-process JAX (P x D devices); judge them in one report.

    Args:
      pair: a pair's name (built in, registered or from an entry point) or a ModelPair. Each worker is a
        fresh process: a pair that is not built in is imported there again, from `imports` or else from
        the module that holds it (one defined in __main__ is refused; see distributed/pairs.py).
      processes: P, the number of torch ranks and of JAX processes.
      devices: D, emulated CPU devices per JAX process (torch ranks use one CPU each).
      batch_size: the global batch; None = 4 rows per JAX device (4 P D). The JAX side needs a
        multiple of P D (equal shards); the torch side alone takes any batch of at least P rows.
      sides: "torch", "jax" or both.
      timeout: seconds per multi-process run, start-up included; rendezvous_timeout bounds the
        workers' init_process_group / jax.distributed.initialize.
      imports: what the workers import before they look the pair up: 'module' (it registers the pair)
        or 'module:NAME' (a ModelPair object), as the CLI's --import and --pair.
      flax: the Flax API of a built-in pair's JAX twin, as compare()'s: "nnx" (None, the default) or "linen";
        a pair of your own runs in its own API (another is refused). An NNX twin trains in every JAX process
        as a user trains one: the module itself under dp_jax.DataParallel (multihost_nnx.py).
      bench: once every check has passed, launch each side again and time `bench_steps` of its training steps
        (the slowest rank per step): the report's `bench` (docs/performance.md, "DDP beside multi-process
        JAX"). A failed check gives no figure, and says why. Costs one more launch per side.
    Cost: 2 P Python processes (imports ~5-10 s each on a busy 2-core machine) plus the
    single-process runs, which overlap with them. Raises LaunchError when a rank fails or hangs.
    """
    from comparisons.distributed import checks

    name = _pair_name(pair)
    for argument, value in (("processes", processes), ("devices", devices)):
        positive_integer(value, argument=argument, caller=CALLER)
    _check_processes(processes)
    if bench:
        positive_integer(bench_steps, argument="bench_steps", caller=CALLER)
    config = _config(name, imports, sides, rendezvous_timeout, processes, Settings(
        batch_size=4 * processes * devices if batch_size is None else batch_size, devices=devices, steps=steps,
        optimizer=optimizer, dtype=dtype, seed=seed, strategies=("explicit",), precision="off", flax=flax,
        caller=CALLER))
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        runs = {side: stack.enter_context(_launch(side, config, processes, timeout)) for side in sides}
        local = checks.single_process_runs(config, processes, sides)
        results = {side: [r.value for r in run.wait()] for side, run in runs.items()}
    seconds = time.perf_counter() - started
    report = checks.report(config, processes, sides, local, results, seconds)
    if bench:
        report.bench = _bench(report, config, processes, sides, timeout, bench_steps)
    return report


def _bench(report: ComparisonReport, config: WorkerConfig, processes: int, sides: Sequence[str], timeout: float,
           bench_steps: int) -> dict:
    """The `bench` section: when every check passed, each side launched once more, alone, and timed."""
    import dataclasses

    from comparisons.distributed import bench

    if not report.ok:
        return bench.section(report.checks, None, processes, config.devices)
    timed = dataclasses.replace(config, bench_steps=bench_steps)
    timings = {}
    for side in sides:  # one side at a time: no timed step shares the cores with the other side
        with _launch(side, timed, processes, timeout) as run:
            timings[side] = bench.slowest([rank.value["bench"] for rank in run.wait()])
    return bench.section(report.checks, timings, processes, config.devices)


def _launch(side: str, config: WorkerConfig, processes: int, timeout: float) -> Launch:
    command = [sys.executable, "-m", WORKERS[side], config.to_json()]
    return Launch(command, processes, side=side, timeout=timeout, env={"PYTHONPATH": _worker_path(config)})


def _worker_path(config: WorkerConfig) -> str:
    """PYTHONPATH for the workers: this process's comparisons first (not whichever one their cwd or an
    install would find), then the folders of the pair's import targets, then the caller's PYTHONPATH."""
    import comparisons
    from comparisons.distributed.pairs import python_path

    ours = str(Path(comparisons.__file__).resolve().parents[1])
    given = filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))
    return os.pathsep.join(dict.fromkeys([ours, *python_path(config.sources), *given]))


def _pair_name(pair: Any) -> str:
    """`pair`'s name; a ModelPair object is registered first (its name must be free or its own)."""
    from comparisons import models
    from comparisons.models.builtin import flax_apis

    if not isinstance(pair, models.ModelPair):
        return pair
    if len(flax_apis(pair)) > 1:  # a built-in pair's twin (either API): registered by name, its API from flax=
        return pair.name
    if pair.name not in models.names():
        models.register(pair)
    elif models.get(pair.name) is not pair:
        raise ComparisonError(f"compare_distributed: pair={pair.name!r}: a different pair of that name is "
                              "registered already; give yours another name")
    return pair.name


def _config(pair: str, imports: Sequence[str], sides: Sequence[str], rendezvous_timeout: float, processes: int,
            settings: Settings) -> WorkerConfig:
    """The workers' config: `settings` (checked) for the registered `pair` on `processes`, once `imports`,
    `sides`, the Flax API and the batch's split over the ranks and the mesh are checked."""
    from comparisons import models
    from comparisons.distributed.pairs import in_api, pair_sources
    from comparisons.models.builtin import flax_api

    if not isinstance(pair, str) or pair not in models.names():
        raise ComparisonError(f"compare_distributed: pair={pair!r} is not a registered pair; pass one of "
                              f"{models.names()}, a ModelPair, or import the module that registers yours first")
    if isinstance(imports, str):
        raise ComparisonError(f"compare_distributed: imports={imports!r} is one string; pass a tuple, "
                              f"imports=({imports!r},)")
    sources = pair_sources(pair, imports)
    _check_sides(sides)
    _check_split(settings.batch_size, processes, settings.devices, sides)
    api = flax_api(in_api(pair, settings.flax))  # a pair of one's own in another API is refused here, by name
    return WorkerConfig(pair, settings.batch_size, settings.steps, settings.optimizer, settings.dtype, settings.seed,
                        settings.devices, float(rendezvous_timeout), sources, api)


def process_limit() -> int:
    """The most ranks a run may start: two per CPU core (at least 4): every rank of each side computes, and past
    that the run only waits on the scheduler (the tests' 3 ranks on a 2-core machine run in about a minute)."""
    return max(4, 2 * (os.cpu_count() or 1))


def _check_processes(processes: int) -> None:
    if processes > process_limit():
        raise ComparisonError(
            f"{CALLER}: processes={processes} would start 2 x {processes} worker processes (a DDP rank and a JAX "
            f"process each) on {os.cpu_count()} CPU cores; pass at most {process_limit()}, and more devices per "
            "process (devices=) for a larger mesh")


def _check_sides(sides: Any) -> None:
    if isinstance(sides, str):  # it would iterate letter by letter
        raise ComparisonError(f"compare_distributed: sides={sides!r} is one string; pass a tuple, sides=({sides!r},)")
    if not hasattr(sides, "__iter__"):
        raise ComparisonError(f"compare_distributed: sides={sides!r} is not a sequence of side names; pass one or "
                              f"both of {SIDES}")
    unknown = [s for s in sides if s not in SIDES]
    if not sides or unknown:
        raise ComparisonError(f"compare_distributed: sides={list(sides)!r}; pass one or both of {SIDES}")


def _check_split(batch: int, processes: int, devices: int, sides: Sequence[str]) -> None:
    """The JAX side's equal shards over P x D devices, and a row for every torch rank."""
    if "jax" in sides and batch % (processes * devices):
        raise ComparisonError(
            f"compare_distributed: batch_size={batch} does not split into {processes} x {devices} equal shards, "
            f"which a sharded global JAX array needs; pass a multiple of {processes * devices}, or "
            "sides=('torch',) to measure DDP alone on an uneven batch")
    try:
        chunk_rows(batch, processes)
    except ValueError as error:
        raise ComparisonError(f"compare_distributed: {error}") from None
