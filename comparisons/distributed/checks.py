"""The checks of a multi-process comparison, and the one-process runs they are checked against.

Same semantics, checked to the report's tolerance: DDP vs DataParallel on P devices (outputs,
loss, gradients, rank 0's BatchNorm statistics, parameters after K steps); every DDP rank and
every JAX process agreeing with rank 0; multi-process JAX vs dp_jax on P x D devices; torch's
DataParallel on P x D devices vs multi-process JAX. Different by design, named and measured
(such a check passes when the difference is there, so a vanished difference is noticed too):
  - uneven global batch: DDP weighs each rank's mean loss 1/P, DataParallel each row 1/B;
    DDP is then also checked against DataParallel trained on DDP's objective;
  - buffers: DDP broadcasts rank 0's buffers at each forward, so after the last step the ranks'
    BatchNorm running statistics differ by their own last update;
  - BatchNorm without SyncBatchNorm: each rank normalises its own rows, not all B;
  - DDP (P statistics groups) vs the JAX mesh (P x D groups), for models with BatchNorm.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from comparisons.distributed.config import WorkerConfig, chunk_rows
from comparisons.harness import tolerance_record
from comparisons.judge import TOLERANCES
from comparisons.placement import PlacementMap, canonical_path
from comparisons.runs import BackendRun, RunConfig, RunInputs
from comparisons.verdicts import Check, ComparisonReport

JAX_LABEL = "jax:multi-process"


@dataclasses.dataclass
class LocalRuns:
    """The one-process runs (None where not needed) and the global batch they share."""

    targets: np.ndarray
    torch_dp: BackendRun | None = None         # dp_torch.DataParallel on P devices: DDP's chunks
    torch_rank_mean: BackendRun | None = None  # the same with DDP's loss weighting (uneven batches)
    torch_whole: BackendRun | None = None      # one device, the whole batch (what SyncBatchNorm sees)
    torch_mesh: BackendRun | None = None       # dp_torch.DataParallel on P x D devices: the mesh's chunks
    jax_dp: BackendRun | None = None           # dp_jax.DataParallel('explicit') on P x D JAX devices


def single_process_runs(config: WorkerConfig, processes: int, sides) -> LocalRuns:
    """Train the one-process references in this process (JAX gets P x D CPU devices if it has not started)."""
    import torch

    from comparisons.distributed.pairs import in_api
    from comparisons.runs import set_jax_cpu_devices
    from comparisons.runs.torch_run import run_torch

    if "jax" in sides:  # before the build: an NNX twin's RNG key starts JAX, fixing its device count
        set_jax_cpu_devices(processes * config.devices)
    pair = in_api(config.pair, config.flax)
    pair, (module, flax_module, variables) = pair.build_declared(seed=config.seed, dtype=np.dtype(config.dtype))
    inputs, targets = pair.make_inputs(config.batch_size, config.seed, np.dtype(config.dtype))
    run_config = RunConfig(batch_size=config.batch_size, steps=config.steps, optimizer=config.optimizer,
                           dtype=config.dtype, seed=config.seed, dim=pair.batch_axis)
    cpu, runs = torch.device("cpu"), LocalRuns(targets)

    def torch_run(n, the_pair=pair):
        return run_torch(RunInputs(the_pair, run_config, inputs, targets), module, [cpu] * n, cpu,
                         progress=lambda: None)

    if "torch" in sides:
        runs.torch_dp = torch_run(processes)
        rows = chunk_rows(config.batch_size, processes)
        if len({b - a for a, b in rows}) > 1:
            runs.torch_rank_mean = torch_run(processes, dataclasses.replace(
                pair, loss_torch=_rank_mean(pair.loss_torch, rows)))
        if pair.has_batch_stats:
            runs.torch_whole = torch_run(1)
    if "jax" in sides:
        mesh = processes * config.devices
        runs.torch_mesh = torch_run(mesh)
        runs.jax_dp = _jax_run(RunInputs(pair, run_config, inputs, targets), flax_module, variables, mesh)
    return runs


def _rank_mean(loss_torch, rows):
    """DDP's objective on one process: the mean over ranks of each rank's own (mean) loss."""
    def loss(output, target):
        return sum(loss_torch(output[a:b], target[a:b]) for a, b in rows) / len(rows)
    return loss


def _jax_run(run: RunInputs, flax_module, variables, n: int) -> BackendRun:
    import jax

    from comparisons.runs import jax_devices
    from comparisons.runs.jax_run import run_jax

    devices = jax_devices(n)
    with jax.enable_x64(run.config.dtype == "float64"), jax.default_matmul_precision("highest"):
        return run_jax(run, flax_module, variables, devices, "explicit", progress=lambda: None)


def report(config: WorkerConfig, processes: int, sides, local: LocalRuns, results: dict[str, list[dict]],
           seconds: float) -> ComparisonReport:
    """Every check, the placements (process x device) and notes, in one ComparisonReport."""
    from comparisons.distributed import judge
    from comparisons.distributed.pairs import in_api

    pair, tol = in_api(config.pair, config.flax), TOLERANCES[config.dtype]
    mesh = processes * config.devices
    checks: list[Check] = []
    if "torch" in sides:
        checks += judge.torch_checks(pair, local, results["torch"], config, tol)
    if "jax" in sides:
        checks += judge.jax_checks(pair, local, results["jax"], tol)
        checks += judge.cross_checks(pair, local, results, tol)
    placements = {label: PlacementMap.from_rows([row for r in results[side] for row in r["placement"]])
                  for side, label in (("torch", "torch"), ("jax", JAX_LABEL)) if side in sides}
    checks += [judge.placement_check(side, placements, config, processes) for side in sides]
    torch_rows = [b - a for a, b in chunk_rows(config.batch_size, processes)]
    with_jax = "jax" in sides
    return ComparisonReport(
        model=config.pair, flax=config.flax, batch_size=config.batch_size, devices=mesh if with_jax else processes,
        chunk_sizes=[config.batch_size // mesh] * mesh if with_jax else torch_rows,
        strategies=[JAX_LABEL] if with_jax else ["none (torch only)"], steps=config.steps,
        optimizer=config.optimizer, dtype=config.dtype, seed=config.seed,
        torch_devices=f"DDP on {processes} gloo rank(s), one CPU each",
        tolerance=tolerance_record(config.dtype, "off"),
        checks=checks, placements=placements, notes=_notes(config, processes, sides, torch_rows, results, seconds),
        layers={layer.torch: canonical_path(layer.flax) for layer in pair.mapping})


def _notes(config, processes, sides, torch_rows, results, seconds) -> list[str]:
    notes = []
    if "torch" in sides:
        worst = max(r["seconds"] for r in results["torch"])
        notes.append(f"torch: stock DistributedDataParallel, {processes} rank(s) (gloo), rows per rank "
                     f"{torch_rows}; slowest rank {worst:.1f} s from rendezvous to result")
    if "jax" in sides:
        worst = max(r["seconds"] for r in results["jax"])
        notes.append(f"jax: {processes} process(es) x {config.devices} CPU device(s) (jax.distributed, gloo "
                     f"collectives), one mesh of {processes * config.devices}; slowest process {worst:.1f} s")
        notes.append(_jax_device_names(results["jax"], config.devices))
        notes.append(f"jax step: {results['jax'][0]['trained']}, over every process's devices; the batch built "
                     "from each process's rows")
    notes.append(f"wall time {seconds:.1f} s: the multi-process runs and the one-process references together")
    return notes


def _jax_device_names(ranks: list[dict], devices: int) -> str:
    """Why process 1's devices are called e.g. cpu:2048: names are JAX device ids, not positions in the mesh."""
    names = {}
    for result in ranks:
        for row in result["placement"]:
            names.setdefault(row["process"], set()).add((row["logical_index"], row["device"]))
    held = "; ".join(f"process {p}: " + ", ".join(f"{d} (device {i})" for i, d in sorted(names[p]))
                     for p in sorted(names))
    return (f"jax device names are JAX's device ids, which each process numbers from its own base (process k's "
            f"first CPU device is id k x 2048 on JAX 0.10), not mesh positions; the checks use the mesh position "
            f"(device i = process x {devices} + local index): {held}")
