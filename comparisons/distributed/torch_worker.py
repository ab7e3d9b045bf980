"""One rank of the torch side: a pair's torch model under stock DistributedDataParallel (gloo, CPU).

    python -m comparisons.distributed.torch_worker '<WorkerConfig JSON>'

Reads torchrun's environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), so `torchrun
--nproc-per-node P -m comparisons.distributed.torch_worker '...'` runs it too. Every rank builds
the same weights and global batch from the seed, takes its torch chunk of rows, and trains K steps
with torch.optim; it hands back (Flax layout, so JAX's numbers compare directly) its first-step
output, loss and gradients, its BatchNorm statistics after the first and the last step, the
parameters after K steps and where each tensor lived.
"""
from __future__ import annotations

import dataclasses
import datetime
import os
import sys
import time
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from comparisons.convert import torch_grads_to_flax
from comparisons.distributed import pairs
from comparisons.distributed.bench import time_steps
from comparisons.distributed.config import WorkerConfig, chunk_rows
from comparisons.distributed.ranks import write_result
from comparisons.placement import PlacementMap, placement_of
from comparisons.runs import torch_optimizer


def main(argv: list[str]) -> int:
    config = WorkerConfig.from_json(argv[0])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    started = time.perf_counter()
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=config.rendezvous_timeout))
    try:
        result = train(config, rank, world)
    finally:
        dist.destroy_process_group()
    result["seconds"] = time.perf_counter() - started
    write_result(result)
    return 0


def train(config: WorkerConfig, rank: int, world: int) -> dict[str, Any]:
    """K DDP steps on this rank's rows of the global batch; the numbers and placement to hand back."""
    pair = pairs.load(config.pair, config.sources, config.seed, config.flax)
    dtype = np.dtype(config.dtype)
    module = torch_model(pair, config.seed, dtype)
    inputs, targets = pair.make_inputs(config.batch_size, config.seed, dtype)
    start, stop = chunk_rows(config.batch_size, world)[rank]
    x = tuple(torch.from_numpy(np.ascontiguousarray(a[start:stop])) for a in inputs)
    y = torch.from_numpy(np.ascontiguousarray(targets[start:stop]))
    model = DistributedDataParallel(module.train())  # CPU: no device_ids; broadcast_buffers=True
    optimizer = torch_optimizer(config.optimizer, model.parameters())
    result: dict[str, Any] = {"rank": rank, "rows": (start, stop)}
    first_s = 0.0  # the first training step's seconds (DDP's bucket set-up): the bench's first call
    for step in range(config.steps):
        started = time.perf_counter()
        optimizer.zero_grad()
        output = model(*x)
        loss = pair.loss_torch(output, y)
        loss.backward()
        if step == 0:
            paused = time.perf_counter()
            result.update(output=_numpy(output), loss=_numpy(loss), grads=_flax_grads(pair, module),
                          stats_first=_batch_stats(pair, module),
                          placement=_placement(model, x, output, rank).to_rows())
            started += time.perf_counter() - paused  # the bench's first call: without this recording
        optimizer.step()
        if step == 0:
            first_s = time.perf_counter() - started
        print(f"torch rank {rank}: step {step + 1}/{config.steps} loss {loss.item():.6f}", file=sys.stderr)
    state = pair.torch_to_flax({n: t.detach().numpy().copy() for n, t in module.state_dict().items()})
    result.update(params=state["params"], stats_last=state.get("batch_stats", {}))
    if config.bench_steps:
        result["bench"] = time_steps(_ddp_step(model, optimizer, pair, x, y), dist.barrier, config.bench_steps,
                                     first_s)
    return result


def _ddp_step(model, optimizer, pair, x: tuple, y: torch.Tensor):
    """One DDP training step (forward, backward with its all-reduce, the optimizer's update) as a thunk."""
    def step() -> None:
        optimizer.zero_grad()
        pair.loss_torch(model(*x), y).backward()
        optimizer.step()
    return step


def torch_model(pair, seed: int, dtype: np.dtype) -> torch.nn.Module:
    """The pair's torch model as `ModelPair.build` makes it (same seed, same weights), without its Flax
    half: building that would load JAX into every torch rank."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return pair.make_torch().to(torch.float64 if dtype == np.float64 else torch.float32)


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().numpy().copy()


def _flax_grads(pair, module) -> dict:
    grads = {n: _numpy(p.grad) for n, p in module.named_parameters() if p.grad is not None}
    return torch_grads_to_flax(grads, pair.mapping)


def _batch_stats(pair, module) -> dict:
    state = {n: _numpy(t) for n, t in module.state_dict().items()}
    return pair.torch_to_flax(state).get("batch_stats", {})


def _placement(model, x, output, rank: int) -> PlacementMap:
    """This rank's module (params, buffers, grads), input rows and output: replica, device and process = rank."""
    records = (placement_of(model.module) + placement_of(list(x), role="input", name="args")
               + placement_of(output, role="output", name="out"))
    return PlacementMap(tuple(dataclasses.replace(r, replica=rank, logical_index=rank, process=rank)
                              for r in records))


if __name__ == "__main__":
    status = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: the collectives' background threads can abort it ("terminate called
    # without an active exception", seen under torchrun) after the work is done and handed back.
    os._exit(status)
