"""Multi-process JAX for an NNX twin: the module itself, trained in place, as a user trains one.

Every process builds the same module (the same converted weights) and places its state replicated on the
global mesh, from the host (each process gives its own copy of the same values). Then
`dp_jax.DataParallel(model, jax.devices(), strategy="sharded").train_step(tx, loss_fn, return_grads=True)`
trains it: dp_jax's functional split/merge of the module around one compiled program over every process's
devices, the update `nnx.Optimizer(model, tx, wrt=nnx.Param)` makes, the module's params and BatchStat
written back after each step (replica 0's statistics, each device its torch chunk). That step hands back
the loss and gradients only, so the first step's output and statistics come from `nnx.jit` of
`DataParallel(copy)(x)` on a copy of the module in train mode. The batch is each process's own rows of one
global array, as for a linen twin (multihost_step.global_batch). Results are keyed as the one-process NNX
twin's variables ({'params': ..., 'batch_stats': ...} by NNX state path), so the same checks judge them.
"""
from __future__ import annotations

import time
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from comparisons.distributed import multihost_step as step
from comparisons.runs import optax_optimizer

TRAINED = ("the NNX module itself, in place: DataParallel(model, strategy='sharded').train_step (nnx.Optimizer's "
           "update on nnx.Param), the first forward by nnx.jit")


def train(config: Any, rank: int, pair: Any, model: Any, data: tuple) -> dict[str, Any]:
    """K steps of `model` (an nnx.Module holding the pair's converted weights) over the global mesh, in place;
    the numbers and placement this process sees. Costs two programs: the first forward and the train step."""
    import dp_jax

    inputs, targets = data
    n_in = len(inputs)
    model.train()
    dp = dp_jax.DataParallel(model, jax.devices(), strategy="sharded")
    tx = optax_optimizer(config.optimizer, frozen_as_keyed(model, pair.frozen))  # what torch freezes stays
    train_step = dp.train_step(tx, _loss_fn(pair, n_in), return_grads=True)
    mesh = train_step.placement.mesh
    rows = step.process_rows(config.batch_size, mesh)
    batch = [step.global_batch(mesh, a[rows]) for a in (*pair.to_flax_inputs(inputs), targets)]
    place_state(model, NamedSharding(mesh, P()))
    before = collections(model)
    output, stats_first = first_forward(model, tuple(batch[:n_in]))
    result: dict[str, Any] = {"rank": rank, "rows": (rows.start, rows.stop), "trained": TRAINED,
                              "output": step.local(output)[rows], "stats_first": step.local(stats_first)}
    first_s = 0.0  # the first training step's seconds (its compile): the bench's first call
    for k in range(config.steps):
        started = time.perf_counter()
        loss, grads = jax.block_until_ready(train_step(*batch))
        first_s = time.perf_counter() - started if k == 0 else first_s
        if k == 0:
            grads = _nested(grads)
            state = {name: tree for name, tree in before.items() if name != "params"}
            result.update(loss=step.local(loss), grads=step.local(grads), placement=step.placement(
                mesh, before["params"], state, tuple(batch[:n_in]), output, grads).to_rows())
        step.log_loss(rank, k, config.steps, loss)
    after = collections(model)
    result.update(params=step.local(after["params"]), stats_last=step.local(after.get("batch_stats", {})),
                  devices=[str(d) for d in jax.local_devices()])
    if config.bench_steps:
        result["bench"] = step.bench(lambda: jax.block_until_ready(train_step(*batch)), config.bench_steps, first_s)
    return result


def _loss_fn(pair: Any, n_inputs: int) -> Any:
    """The pair's loss on the gathered output of `dp(*inputs)`: what NNXTrainStep differentiates."""
    def loss_fn(dp: Any, *batch: Any) -> Any:
        return pair.loss_jax(dp(*batch[:n_inputs]), batch[n_inputs])
    return loss_fn


def frozen_as_keyed(model: Any, frozen: tuple[str, ...]) -> tuple[str, ...]:
    """The dotted paths of `model`'s nnx.Params frozen in torch, spelled as dp_jax's NNX step keys them (NNX's
    `if_`, where `frozen`, a Flax path, reads linen's `if`)."""
    from flax import nnx

    from comparisons.convert import nnx_key

    paths = [path for path, _ in nnx.to_flat_state(nnx.state(model, nnx.Param))]
    return tuple(".".join(map(str, path)) for path in paths if ".".join(nnx_key(path)) in frozen)


def place_state(model: Any, everywhere: NamedSharding) -> None:
    """Every leaf of `model`'s state replaced by a copy replicated on the global mesh of `everywhere`, made from
    this process's host value (an RNG key through its key data). Costs one host copy per leaf."""
    from flax import nnx

    def replicated(leaf: Any) -> jax.Array:
        if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            data = replicated(jax.random.key_data(leaf))
            return jax.random.wrap_key_data(data, impl=jax.random.key_impl(leaf))
        return jax.make_array_from_process_local_data(everywhere, np.asarray(leaf))

    nnx.update(model, jax.tree.map(replicated, nnx.state(model)))


def first_forward(model: Any, inputs: tuple) -> tuple[jax.Array, dict]:
    """(output, batch statistics after the call) of the first step's forward in train mode, from
    `nnx.jit` of `DataParallel(copy)(*inputs)` on a copy of `model` (whose own statistics stay as they are)."""
    from flax import nnx

    import dp_jax

    copy = nnx.clone(model)
    devices = jax.devices()
    output = nnx.jit(lambda m, *x: dp_jax.DataParallel(m, devices, strategy="sharded")(*x))(copy, *inputs)
    return output, collections(copy).get("batch_stats", {})


def collections(model: Any) -> dict:
    """`model`'s variables as the one-process NNX twin's: {'params': ..., 'batch_stats': ...} by state path."""
    from comparisons.models.jax_nnx import NNXApply

    return NNXApply(model).init()


def _nested(by_path: dict) -> dict:
    """{'fc1.kernel': g} (dp_jax's NNX gradients, by dotted state path) as the variables key them,
    {'fc1': {'kernel': g}} (NNX's `if_` as linen's `if`, as `NNXApply.init`)."""
    from flax.traverse_util import unflatten_dict

    from comparisons.convert import nnx_key

    return unflatten_dict({nnx_key(tuple(path.split("."))): leaf for path, leaf in by_path.items()})
