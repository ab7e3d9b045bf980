"""Section 3b: re-replicating every step (torch's way) against resident replicated parameters.

For growing models, t(forward that places the parameters on every device each call) /
t(forward that reuses replicas placed once). dp_torch: DataParallel (replicate per forward)
vs scatter + parallel_apply on replicas made once. dp_jax: `data_parallel` (places every call)
vs `DataParallel` (caches the placed variables), for the explicit and sharded strategies.
"""
from __future__ import annotations

from benchmarks.context import Context
from benchmarks.models import flax_model_and_batch, param_count, torch_model_and_batch
from benchmarks.pipelines import jax_forward, torch_forward
from benchmarks.results import Section
from benchmarks.timing import measure_ratio


def run(ctx: Context) -> Section:
    section = Section(
        "replication", "Re-replicating every step vs resident replicas",
        f"t(replicate every forward) / t(replicas placed once), forward on {ctx.n_devices} devices, batch "
        f"{ctx.batch_size}; median [IQR] of {ctx.settings.reps} alternating repetitions",
    )
    devices, torch_devices = ctx.jax_devices(ctx.n_devices), ctx.torch_devices(ctx.n_devices)
    for width in ctx.size_sweep:
        size = {"model": f"mlp{width}", "params": f"{param_count(width) / 1e6:.2f}M"}
        module, x = torch_model_and_batch(width, ctx.batch_size, torch_devices[0])
        every, once = (torch_forward(module, x, torch_devices, ctx.torch_sync, resident=r) for r in (False, True))
        section.add_ratio({"backend": "dp_torch", **size}, measure_ratio(every, once, ctx.settings))
        model, variables, x = flax_model_and_batch(width, ctx.batch_size, devices[0])
        for strategy in ("explicit", "sharded"):
            labels = {"backend": f"dp_jax {strategy}", **size}
            try:
                every, once = (jax_forward(model, variables, x, devices, strategy, resident=r) for r in (False, True))
                section.add_ratio(labels, measure_ratio(every, once, ctx.settings))
            except Exception as error:  # a strategy that fails is a finding, not a crash
                section.add_failure(labels, error)
    return section
