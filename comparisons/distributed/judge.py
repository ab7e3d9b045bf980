"""Verdicts on the workers' results: what must agree, and the by-design differences, measured.

A by-design check (subject ending "(by design)") passes when the difference is really there
(beyond the tolerance): its numbers are the measured size, and its detail says why it exists.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from comparisons.distributed.config import WorkerConfig, chunk_rows
from comparisons.judge import Bounds, compare_trees
from comparisons.placement import PlacementMap
from comparisons.verdicts import Check

DDP, MULTI = "torch DDP", "JAX multi-process"
WHY = {
    "uneven": "uneven global batch: DDP averages the ranks' gradients of their own mean losses (each rank "
              "weighs 1/P), DataParallel differentiates the mean loss over the gathered batch (each row 1/B)",
    "buffers": "DDP broadcasts rank 0's buffers at every forward; each rank's last BatchNorm update is its own",
    "sync_bn": "BatchNorm without SyncBatchNorm: each rank normalises its own rows; one device (or SyncBatchNorm) "
               "normalises the whole batch",
    "groups": "DDP normalises per rank (P BatchNorm groups), the JAX mesh per device (P x D groups), as "
              "DataParallel on P and on P x D devices do",
}


def same(subject: str, compared: str, actual: Any, expected: Any, tol: float) -> Check:
    return compare_trees(subject, compared, actual, expected, Bounds(tol))


def differs(subject: str, compared: str, actual: Any, expected: Any, tol: float, why: str) -> Check:
    """A measured difference that must be there; passes when it exceeds `tol` (it is not tolerated)."""
    check = compare_trees(subject, compared, actual, expected, Bounds(tol))
    present = check.max_abs is not None and not check.passed
    return Check(f"{subject} (by design)", compared, present, check.max_abs, check.rel_norm, tol,
                 f"{WHY[why]}; measured, not tolerated: {check.detail}")


def torch_checks(pair: Any, local: Any, ranks: list[dict], config: WorkerConfig, tol: float) -> list[Check]:
    """DDP against DataParallel on P devices, its own ranks, and the differences it has by design."""
    dp, p = local.torch_dp.dp, len(ranks)
    vs_dp = f"{DDP} x{p} vs DataParallel x{p}"
    output = np.concatenate([r["output"] for r in ranks])
    ddp_loss = float(np.mean([r["loss"] for r in ranks]))
    checks = [same("outputs", vs_dp, output, dp.outputs, tol)]
    subjects = {"loss": (ddp_loss, _torch_loss(pair, dp.outputs, local.targets)),
                "gradients": (ranks[0]["grads"], dp.gradients),
                "params_after_steps": (ranks[0]["params"], dp.params_after_steps)}
    if local.torch_rank_mean is None:  # equal rows per rank: the same objective
        checks += [same(subject, vs_dp, a, b, tol) for subject, (a, b) in subjects.items()]
    else:
        model = local.torch_rank_mean.dp
        expected = {"loss": _torch_loss(pair, model.outputs, local.targets, _rank_rows(config, p)),
                    "gradients": model.gradients, "params_after_steps": model.params_after_steps}
        for subject, (a, b) in subjects.items():
            checks.append(same(subject, f"{DDP} x{p} vs DataParallel x{p} on DDP's objective", a, expected[subject],
                               tol))
            checks.append(differs(subject, vs_dp, a, b, tol, "uneven"))
    for r in ranks[1:]:
        for subject, key in (("gradients", "grads"), ("params_after_steps", "params")):
            checks.append(same(subject, f"{DDP} rank {r['rank']} vs rank 0", r[key], ranks[0][key], tol))
    if pair.has_batch_stats:
        checks.append(same("batch_stats", f"{vs_dp} (rank 0 and replica 0 keep chunk 0's)",
                           ranks[0]["stats_first"], dp.batch_stats, tol))
        checks += [differs("batch_stats_after_steps", f"{DDP} rank {r['rank']} vs rank 0", r["stats_last"],
                           ranks[0]["stats_last"], tol, "buffers") for r in ranks[1:]]
        checks.append(differs("gradients", f"{DDP} x{p} vs one device, whole batch", ranks[0]["grads"],
                              local.torch_whole.dp.gradients, tol, "sync_bn"))
    return checks


def jax_checks(pair: Any, local: Any, processes: list[dict], tol: float) -> list[Check]:
    """Multi-process JAX against dp_jax.DataParallel on the same number of devices, in one process."""
    dp, n = local.jax_dp.dp, len(local.jax_dp.chunk_sizes)
    vs_dp = f"{MULTI} vs dp_jax DataParallel x{n}"
    checks = [same("outputs", vs_dp, np.concatenate([r["output"] for r in processes]), dp.outputs, tol),
              # the worker's loss is a float32 array, the reference a Python float: a value, compared as one
              same("loss", vs_dp, float(processes[0]["loss"]), _jax_loss(pair, dp.outputs, local.targets), tol),
              same("gradients", vs_dp, processes[0]["grads"], dp.gradients, tol),
              same("params_after_steps", vs_dp, processes[0]["params"], dp.params_after_steps, tol)]
    if pair.has_batch_stats:
        checks.append(same("batch_stats", vs_dp, processes[0]["stats_first"], dp.batch_stats, tol))
    for r in processes[1:]:
        checks.append(same("params_after_steps", f"{MULTI} process {r['rank']} vs process 0", r["params"],
                           processes[0]["params"], tol))
    return checks


def cross_checks(pair: Any, local: Any, results: dict[str, list[dict]], tol: float) -> list[Check]:
    """torch vs JAX across processes: DataParallel on the mesh's devices, and DDP where semantics allow."""
    jax0, mesh = results["jax"][0], local.torch_mesh
    vs = f"torch DataParallel x{len(mesh.chunk_sizes)} vs {MULTI}"
    checks = [same("outputs", vs, mesh.dp.outputs, np.concatenate([r["output"] for r in results["jax"]]), tol),
              same("gradients", vs, mesh.dp.gradients, jax0["grads"], tol)]
    if local.jax_dp.parameter_count == mesh.parameter_count:  # else see the harness's parametrisation note
        checks.append(same("params_after_steps", vs, mesh.dp.params_after_steps, jax0["params"], tol))
    if "torch" in results:
        ddp0, ddp_vs = results["torch"][0], f"{DDP} vs {MULTI}"
        check = differs if pair.has_batch_stats else same
        extra = ("groups",) if pair.has_batch_stats else ()
        if local.torch_rank_mean is None:
            checks.append(check("gradients", ddp_vs, ddp0["grads"], jax0["grads"], tol, *extra))
    return checks


def placement_check(side: str, placements: dict[str, PlacementMap], config: WorkerConfig,
                    processes: int) -> Check:
    """Every rank (torch) / device (JAX) holds every parameter, and its own rows of the batch."""
    label = "torch" if side == "torch" else next(k for k in placements if k != "torch")
    records = placements[label]
    holders = {r.replica for r in records if r.role == "param"}
    names = {r.path for r in records if r.role == "param"}
    full = all({r.path for r in records if r.role == "param" and r.replica == h} == names for h in holders)
    if side == "torch":
        expected_rows = [b - a for a, b in chunk_rows(config.batch_size, processes)]
        wanted_holders = set(range(processes))
        owner_ok = all(r.process == r.replica for r in records)
    else:
        mesh = processes * config.devices
        expected_rows, wanted_holders = [config.batch_size // mesh] * mesh, set(range(mesh))
        owner_ok = all(r.replica is not None and r.process == r.replica // config.devices for r in records)
    rows = [r.shape[0] for r in sorted(records.filter(role="input"), key=lambda r: r.replica) if r.path == "args.0"]
    passed = holders == wanted_holders and full and rows == expected_rows and owner_ok
    what = "rank" if side == "torch" else "device"
    return Check("placement", f"{label}: every {what} holds every parameter and its rows", passed,
                 detail=f"{len(holders)} {what}(s) hold {len(names)} parameter(s) each: {full}; rows per {what} "
                        f"{rows} (expected {expected_rows}); process of each {what} as expected: {owner_ok}")


def _rank_rows(config: WorkerConfig, p: int) -> list[tuple[int, int]]:
    return chunk_rows(config.batch_size, p)


def _torch_loss(pair: Any, output: np.ndarray, targets: np.ndarray, rows=None) -> float:
    """The pair's torch loss on a host output: on all rows, or the mean of each row range's loss."""
    import torch

    out, target = torch.from_numpy(np.asarray(output)), torch.from_numpy(np.asarray(targets))
    if rows is None:
        return float(pair.loss_torch(out, target))
    return float(sum(pair.loss_torch(out[a:b], target[a:b]) for a, b in rows) / len(rows))


def _jax_loss(pair: Any, output: np.ndarray, targets: np.ndarray) -> float:
    import jax

    with jax.enable_x64(output.dtype == np.float64):
        return float(pair.loss_jax(output, targets))
