"""One process of the JAX side: P processes x D emulated CPU devices, one global mesh, K optax steps.

    python -m comparisons.distributed.jax_worker '<WorkerConfig JSON>'

Reads the launcher's environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT: process 0 hosts
the coordinator there). Every process builds the same weights and global batch from the seed and
puts its own rows on its own devices with `jax.make_array_from_process_local_data`; dp_jax's
compiled steps (`multihost_step.compiled_steps`) run over every process's devices, as
`dp_jax.DataParallel` on P x D devices: each device its torch chunk (BatchNorm per chunk), the
loss on the gathered output, replica 0's statistics. Hands back the first step's loss, output
rows and gradients, the statistics, the parameters after K steps and every addressable shard's
placement.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Any

TRAINED = ("dp_jax's compiled step (DataParallel(apply, strategy='sharded').value_and_grad and train_step) on "
           "the variables")


def configure(devices: int, x64: bool) -> None:
    """Before JAX starts: `devices` CPU devices in this process and gloo CPU collectives.

    A device-count XLA flag inherited from the parent (the tests set one) would override
    jax_num_cpu_devices, so it is dropped here.
    """
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if "xla_force_host_platform_device_count" not in f]
    os.environ["XLA_FLAGS"] = " ".join(flags)
    import jax

    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_num_cpu_devices", devices)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.config.update("jax_enable_x64", x64)


def main(argv: list[str]) -> int:
    from comparisons.distributed.config import WorkerConfig

    config = WorkerConfig.from_json(argv[0])
    configure(config.devices, config.dtype == "float64")
    import jax

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    started = time.perf_counter()
    jax.distributed.initialize(f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}", world, rank,
                               initialization_timeout=max(1, int(config.rendezvous_timeout)))
    try:
        result = train(config, rank)
    finally:
        jax.distributed.shutdown()
    result["seconds"] = time.perf_counter() - started
    from comparisons.distributed.ranks import write_result

    write_result(result)
    return 0


def train(config: Any, rank: int) -> dict[str, Any]:
    """K steps over the global mesh: the numbers and placement this process sees. A linen twin (or a FlaxApply)
    trains through dp_jax's compiled steps on its variables; an NNX twin as its module, in place
    (multihost_nnx.py)."""
    import numpy as np

    from comparisons.distributed import multihost_nnx, pairs
    from comparisons.models.jax_nnx import NNXApply

    pair = pairs.load(config.pair, config.sources, config.seed, config.flax)
    pair, (_, flax_module, variables) = pair.build_declared(seed=config.seed, dtype=np.dtype(config.dtype))
    data = pair.make_inputs(config.batch_size, config.seed, np.dtype(config.dtype))
    if isinstance(flax_module, NNXApply):
        return multihost_nnx.train(config, rank, pair, flax_module.module_with(variables), data)
    return _train_variables(config, rank, pair, flax_module, variables, data)


def _train_variables(config: Any, rank: int, pair: Any, flax_module: Any, variables: dict, data: tuple
                     ) -> dict[str, Any]:
    """dp_jax's value_and_grad and train_step of a linen-style apply, on replicated variables."""
    import jax

    from comparisons.distributed import multihost_step as step

    inputs, targets = data
    n_in = len(inputs)
    grad_step, train_step, tx = step.compiled_steps(pair, flax_module, config.optimizer, n_in)
    mesh = grad_step.placement.mesh  # dp_jax's mesh over jax.devices(): the batch goes straight in
    rows = step.process_rows(config.batch_size, mesh)
    batch = [step.global_batch(mesh, a[rows]) for a in (*pair.to_flax_inputs(inputs), targets)]
    params, state = step.replicated(mesh, variables)
    opt_state = tx.init(params)
    result: dict[str, Any] = {"rank": rank, "rows": (rows.start, rows.stop), "trained": TRAINED}
    first_s = 0.0  # the first training step's seconds (its compile): the bench's first call
    for k in range(config.steps):
        if k == 0:  # the first step's output and gradients, from dp_jax's value_and_grad step
            (loss, (output, updated)), grads = grad_step({"params": params, **state}, *batch)
            result.update(loss=step.local(loss), grads=step.local(grads["params"]),
                          output=step.local(output)[rows], stats_first=step.local(updated.get("batch_stats", {})),
                          placement=step.placement(mesh, params, state, tuple(batch[:n_in]), output,
                                                   grads["params"]).to_rows())
        started = time.perf_counter()
        params, opt_state, state, loss = jax.block_until_ready(train_step(params, opt_state, state, *batch))
        first_s = time.perf_counter() - started if k == 0 else first_s
        step.log_loss(rank, k, config.steps, loss)
    result.update(params=step.local(params), stats_last=step.local(state.get("batch_stats", {})),
                  devices=[str(d) for d in jax.local_devices()])
    if config.bench_steps:
        carried = [params, opt_state, state]

        def one_step() -> None:
            *carried[:], loss = train_step(*carried, *batch)
            jax.block_until_ready(loss)
        result["bench"] = step.bench(one_step, config.bench_steps, first_s)
    return result


if __name__ == "__main__":
    status = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: the collectives' background threads can abort it ("terminate called
    # without an active exception", seen under torchrun) after the work is done and handed back.
    os._exit(status)
