"""The multi-process JAX training step: plain `jax.jit` with NamedShardings over one global mesh.

Stand-in for dp_jax's compiled step (`DataParallel.train_step(tx)`, issue 11), which does not
exist yet; when it lands, `train_step` below is the one function to swap for it. Until then this
step computes DataParallel's function itself, with `jax.shard_map`: each device applies the module
to its own chunk of the batch (so BatchNorm normalises per chunk, as torch's replicas do), the loss
is taken on the gathered (sharded) output, `jax.value_and_grad` sums the replicas' gradients, and
replica 0's BatchNorm statistics are kept and replicated to every device. Params, optimizer state
and statistics stay replicated on the mesh; the batch is sharded along it.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from comparisons._jax_run import make_optimizer
from comparisons._placement_walk import device_label
from comparisons.placement import PlacementMap, PlacementRecord

AXIS = "d"


def global_mesh() -> Mesh:
    """A 1-D mesh over every process's devices (jax.devices(): process 0's first)."""
    return Mesh(np.array(jax.devices()), (AXIS,))


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
    return jax.make_array_from_process_local_data(NamedSharding(mesh, P(AXIS)), local_rows)


def replicated(mesh: Mesh, variables: dict) -> tuple[Any, dict]:
    """(params, other collections), each leaf replicated on every device of the mesh."""
    everywhere = NamedSharding(mesh, P())
    placed = jax.tree.map(lambda a: jax.make_array_from_process_local_data(everywhere, np.asarray(a)), variables)
    return placed["params"], {k: v for k, v in placed.items() if k != "params"}


def train_step(pair: Any, flax_module: Any, mesh: Mesh, optimizer: str) -> tuple[Callable, Callable]:
    """(step, init): step(params, opt_state, state, x, y) -> (params, opt_state, state, loss, grads, output).

    Compiles once per input shapes (on the first call); every output but `output` is replicated.
    """
    tx = make_optimizer(optimizer)
    forward = _sharded_forward(flax_module, mesh, pair.has_batch_stats)

    def loss_fn(params, state, x, y):
        output, updated = forward(params, state, x)
        return pair.loss_jax(output, y), (output, updated)

    everywhere, rows = NamedSharding(mesh, P()), NamedSharding(mesh, P(AXIS))

    @jax.jit
    def step(params, opt_state, state, x, y):
        (loss, (output, updated)), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, state, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        out = (params, opt_state, {**state, **updated}, loss, grads)
        return (*jax.lax.with_sharding_constraint(out, everywhere),
                jax.lax.with_sharding_constraint(output, rows))
    return step, tx.init


def _sharded_forward(flax_module: Any, mesh: Mesh, has_batch_stats: bool) -> Callable:
    """(params, state, x) -> (output sharded by rows, replica 0's updated collections)."""
    def per_device(params, state, x):
        variables = {"params": params, **state}
        if not has_batch_stats:
            return flax_module.apply(variables, *x, train=True), {}
        output, updated = flax_module.apply(variables, *x, train=True, mutable=["batch_stats"])
        return output, jax.tree.map(lambda a: a[None], updated)  # a leading replica axis

    # check_vma=False, as dp_jax's mapped strategies and jax.pmap: a model written for one device (an RNN's
    # scan with an unvarying initial carry) need not type its values as varying across devices.
    mapped = jax.shard_map(per_device, mesh=mesh, in_specs=(P(), P(), P(AXIS)), out_specs=(P(AXIS), P(AXIS)),
                           check_vma=False)

    def forward(params, state, x):
        output, stacked = mapped(params, state, x)
        return output, jax.tree.map(lambda a: a[0], stacked)  # replica 0's, as torch keeps
    return forward


def local(tree: Any) -> Any:
    """Host copies of replicated arrays, read from this process's first device (no communication)."""
    return jax.tree.map(lambda a: np.asarray(a.addressable_data(0)).copy(), tree)


def local_rows(array: jax.Array) -> np.ndarray:
    """This process's rows of a row-sharded global array, in order."""
    shards = sorted(array.addressable_shards, key=lambda s: s.index[0].start or 0)
    return np.concatenate([np.asarray(s.data) for s in shards])


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
    """"params.fc.kernel", "batch_stats.bn1.mean", "args[0]", "out": the paths placement_of gives."""
    if prefix == "args":
        return prefix + jax.tree_util.keystr(path)
    key = jax.tree_util.keystr(path, simple=True, separator=".")
    return f"{prefix}.{key}" if key else prefix


def _record(role: str, path: str, shard: Any, devices: list[str]) -> PlacementRecord:
    index = devices.index(str(shard.device))
    return PlacementRecord(replica=index, path=path, role=role, device=device_label(shard.device),
                           logical_index=index, shape=tuple(shard.data.shape), dtype=str(shard.data.dtype),
                           process=shard.device.process_index)
