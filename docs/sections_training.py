"""Generators for the training pages (gradients, batchnorm): where sums and statistics come from."""
from __future__ import annotations

from sections import generator
from sections_pipeline import table

# --- gradients.md: where the sum over replicas happens ---------------------------------------------


def _grad_variants():
    """(name, grad) for the ways to take a data-parallel gradient, on 4 devices, one linear loss."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import AxisType, Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    devices = jax.devices()[:4]
    mesh = Mesh(np.array(devices), ("d",), axis_types=(AxisType.Auto,))
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((8, 3), np.float32), rng.standard_normal(3, np.float32)

    def loss(w, x):
        return jnp.sum((x @ w) ** 2)

    def shard_map_grad(check_vma: bool, psum: bool):
        def per_device(w, x):
            g = jax.grad(loss)(w, x)
            return jax.lax.psum(g, "d") if psum else g
        mapped = jax.shard_map(per_device, mesh=mesh, in_specs=(P(), P("d")), out_specs=P(), check_vma=check_vma)
        return jax.jit(mapped)(w, x)

    sharded_x = jax.device_put(x, NamedSharding(mesh, P("d")))
    replicated_w = jax.device_put(w, NamedSharding(mesh, P()))
    variants = [
        (f"`shard_map`, check_vma={vma}, " + ("`psum` added" if psum else "no `psum`"), shard_map_grad(vma, psum))
        for vma in (True, False) for psum in (False, True)
    ]
    global_grad = jax.jit(jax.grad(loss))(replicated_w, sharded_x)
    variants.append(("`jax.jit` of the global loss, x sharded `P('d')`", global_grad))
    return variants, jax.grad(loss)(w, x), jax.grad(loss)(w, x[:2])


@generator("grad-trap")
def grad_trap_table() -> str:
    import numpy as np

    variants, full, first_shard = _grad_variants()
    rows = []
    for name, grad in variants:
        if np.allclose(grad, full, rtol=1e-5):
            verdict = "the full-batch gradient ✔"
        elif np.allclose(grad, 4 * full, rtol=1e-5):
            verdict = "**4 ×** the full-batch gradient"
        elif np.allclose(grad, first_shard, rtol=1e-5):
            verdict = "**device 0's shard only**, silently"
        else:
            raise AssertionError(f"{name}: unexpected gradient {grad}")
        rows.append([name, verdict])
    return table(["how the gradient is taken (4 devices)", "what comes back"], rows)


# --- batchnorm.md: whose statistics end up in the running buffers ---------------------------------


def _which_batch(value, chunk0, full) -> str:
    import numpy as np

    if np.allclose(value, chunk0, atol=1e-6):
        return "chunk 0"
    if np.allclose(value, full, atol=1e-6):
        return "full batch"
    return "neither"


def _torch_bn_rows(x) -> list[list[str]]:
    import torch

    import dp_torch

    def stats(run) -> tuple:
        bn = torch.nn.BatchNorm1d(3)
        run(bn)
        return bn.running_mean.numpy(), bn.running_var.numpy()

    x = torch.from_numpy(x)
    full, chunk0 = stats(lambda bn: bn(x)), stats(lambda bn: bn(x[:2]))
    dp = stats(lambda bn: dp_torch.DataParallel(bn, ["cpu"] * 4)(x))
    return [["PyTorch `DataParallel`", *(_which_batch(v, c, f) for v, c, f in zip(dp, chunk0, full))]]


def _jax_bn_rows(x) -> list[list[str]]:
    import flax.linen as nn
    import jax

    import dp_jax

    local, synced = nn.BatchNorm(use_running_average=False), nn.BatchNorm(False, axis_name="batch")
    variables = local.init(jax.random.key(0), x)
    devices = jax.devices()[:4]

    def moments(updates) -> tuple:
        return updates["batch_stats"]["mean"], updates["batch_stats"]["var"]

    def parallel(module, **options) -> tuple:
        return moments(dp_jax.DataParallel(module, devices, **options).apply(variables, x, mutable=["batch_stats"])[1])

    full, chunk0 = (moments(local.apply(variables, data, mutable=["batch_stats"])[1]) for data in (x, x[:2]))
    runs = [("dp_jax `DataParallel` (default)", local, {}),
            ("dp_jax, `sync_collections=True`", local, {"sync_collections": True}),
            ("dp_jax, `axis_name='batch'` + `BatchNorm(axis_name='batch')`", synced,
             {"strategy": "shard_map", "axis_name": "batch"})]
    return [[name, *(_which_batch(v, c, f) for v, c, f in zip(parallel(module, **options), chunk0, full))]
            for name, module, options in runs]


@generator("batchnorm-stats")
def batchnorm_stats_table() -> str:
    import numpy as np

    x = np.random.default_rng(0).standard_normal((8, 3)).astype(np.float32) * [1.0, 2.0, 3.0] + [0.0, 1.0, -1.0]
    x = x.astype(np.float32)
    rows = _torch_bn_rows(x) + _jax_bn_rows(x)
    return table(["one training step, batch 8 on 4 devices", "running mean from", "running var from"], rows)
