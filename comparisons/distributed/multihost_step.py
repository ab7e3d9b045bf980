"""Multi-process JAX through dp_jax's compiled step: one global mesh, each process's own rows.

`dp_jax.DataParallel(module, jax.devices(), strategy="sharded")` over every process's devices:
`value_and_grad` gives the first step's loss, output and gradients, `train_step(tx)` the optax
updates. Each device computes its torch chunk (BatchNorm per chunk, as torch's replicas do), the
loss is on the gathered output, replica 0's statistics are kept. Params, optimizer state and
statistics stay replicated; the batch is a global array sharded along dp_jax's mesh, built from
each process's rows with `jax.make_array_from_process_local_data`, so dp_jax's step finds it
placed already (it would otherwise send it from the host, which needs the whole batch everywhere).
"""
from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from comparisons.placement import PlacementMap, PlacementRecord, device_label
from comparisons.runs import optax_optimizer


def process_rows(batch_size: int, mesh: Mesh) -> slice:
    """The rows of the global batch this process's devices hold: equal chunks, in mesh order."""
    devices = list(mesh.devices.flat)
    if batch_size % len(devices):
        raise ValueError(f"batch_size={batch_size} does not split evenly over {len(devices)} devices; "
                         f"a sharded global array needs equal shards: pass a multiple of {len(devices)}")
    chunk = batch_size // len(devices)
    mine = [i for i, d in enumerate(devices) if d.process_index == jax.process_index()]
    if mine != list(range(mine[0], mine[-1] + 1)):
        raise RuntimeError(f"process {jax.process_index()} holds mesh positions {mine}, not a contiguous run")
    return slice(mine[0] * chunk, (mine[-1] + 1) * chunk)


def global_batch(mesh: Mesh, local_rows: np.ndarray) -> jax.Array:
    """One global array sharded along the mesh, from this process's rows (no copy to other processes)."""
    return jax.make_array_from_process_local_data(NamedSharding(mesh, P(mesh.axis_names[0])), local_rows)


def replicated(mesh: Mesh, variables: dict) -> tuple[Any, dict]:
    """(params, other collections), each leaf replicated on every device of the mesh."""
    everywhere = NamedSharding(mesh, P())
    placed = jax.tree.map(lambda a: jax.make_array_from_process_local_data(everywhere, np.asarray(a)), variables)
    return placed["params"], {k: v for k, v in placed.items() if k != "params"}


def compiled_steps(pair: Any, flax_module: Any, optimizer: str, n_inputs: int) -> tuple[Any, Any, Any]:
    """(grad_step, train_step, tx) from dp_jax's compiled step over every process's devices.

    grad_step(variables, *x, y) -> ((loss, (output, collections)), grads) for the first step's numbers;
    train_step(params, opt_state, collections, *x, y) -> (params, opt_state, collections, loss).
    Both are `dp_jax.DataParallel(..., strategy="sharded")` steps on `jax.devices()` (all processes):
    torch's chunks per device, the loss on the gathered output, replica 0's statistics. `tx` leaves the
    parameters at `pair.frozen` unchanged (a pair from `ModelPair.build_declared`), as torch.optim does.
    """
    import dp_jax

    wrapper = dp_jax.DataParallel(flax_module, jax.devices(), strategy="sharded")
    mutable = ["batch_stats"] if pair.has_batch_stats else False

    def forward(variables, *batch):
        inputs, y = batch[:n_inputs], batch[n_inputs]
        result = wrapper.apply(variables, *inputs, train=True, mutable=mutable)
        output, updated = result if mutable else (result, {})
        return pair.loss_jax(output, y), output, updated

    def with_output(variables, *batch):
        loss, output, updated = forward(variables, *batch)
        return loss, (output, updated)

    def with_collections(variables, *batch):
        loss, _, updated = forward(variables, *batch)
        return loss, updated

    tx = optax_optimizer(optimizer, pair.frozen)  # what torch freezes gets no update, as in one process
    return (wrapper.value_and_grad(with_output, has_aux=True),
            wrapper.train_step(tx, with_collections, has_aux=True), tx)


def bench(one_step: Any, steps: int, first_s: float) -> dict[str, Any]:
    """`bench.time_steps` of `one_step` across every process: the barrier is a global device sync."""
    from jax.experimental import multihost_utils

    from comparisons.distributed.bench import time_steps

    return time_steps(one_step, lambda: multihost_utils.sync_global_devices("bench step"), steps, first_s)


def log_loss(rank: int, k: int, steps: int, loss: jax.Array) -> None:
    """One line on stderr per step: what a hung or slow run's log shows of its progress."""
    import sys

    print(f"jax process {rank}: step {k + 1}/{steps} loss {float(local(loss)):.6f}", file=sys.stderr)


def local(tree: Any) -> Any:
    """Host copies of replicated arrays, read from this process's first device (no communication)."""
    return jax.tree.map(lambda a: np.asarray(a.addressable_data(0)).copy(), tree)


def placement(mesh: Mesh, params: Any, state: dict, x: tuple, output: jax.Array, grads: Any) -> PlacementMap:
    """A record per addressable shard of this process: variables, batch, output and grads.

    Walks `addressable_shards` itself: `placement_of` reads a one-shard array as one global value,
    which is what a process with one device holds of a global array, with the global shape.
    """
    devices = [str(d) for d in mesh.devices.flat]
    trees = [("param", "params", params), *[("buffer", name, tree) for name, tree in state.items()],
             ("input", "args", list(x)), ("output", "out", output), ("grad", "params", grads)]
    records = [_record(role, _path(prefix, path), shard, devices)
               for role, prefix, tree in trees
               for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]
               for shard in leaf.addressable_shards]
    return PlacementMap(tuple(records))


def _path(prefix: str, path: tuple) -> str:
    """"params.fc.kernel", "batch_stats.bn1.mean", "args.0", "out": the paths placement_of gives."""
    key = jax.tree_util.keystr(path, simple=True, separator=".")
    return f"{prefix}.{key}" if key else prefix


def _record(role: str, path: str, shard: Any, devices: list[str]) -> PlacementRecord:
    index = devices.index(str(shard.device))
    return PlacementRecord(replica=index, path=path, role=role, device=device_label(shard.device),
                           logical_index=index, shape=tuple(shard.data.shape), dtype=str(shard.data.dtype),
                           process=shard.device.process_index)
