"""Section 3a: where one data-parallel forward spends its time, per backend.

Each step (scatter, replicate, parallel_apply, gather) is timed on its own, in rotating order,
and reported as its share of their sum: dp_torch on ["cpu"] * n, dp_jax's explicit strategy
on n JAX devices (the mapped strategies fuse the steps into one program, so they have no split).
"""
from __future__ import annotations

from benchmarks.context import Context
from benchmarks.models import flax_model_and_batch, torch_model_and_batch
from benchmarks.pipelines import jax_steps, torch_steps
from benchmarks.results import Section
from benchmarks.timing import measure_shares


def run(ctx: Context) -> Section:
    section = Section(
        "breakdown", "Where the time goes: share of each step in one forward",
        f"each step timed alone on {ctx.n_devices} devices, batch {ctx.batch_size}; share of the summed "
        f"time, median (min-max) over {ctx.settings.reps} repetitions",
    )
    devices, torch_devices = ctx.jax_devices(ctx.n_devices), ctx.torch_devices(ctx.n_devices)
    for width in ctx.strategy_widths:
        module, x = torch_model_and_batch(width, ctx.batch_size, torch_devices[0])
        steps = torch_steps(module, x, torch_devices, ctx.torch_sync)
        section.add_shares({"backend": "dp_torch", "model": f"mlp{width}"}, measure_shares(steps, ctx.settings))
        model, variables, x = flax_model_and_batch(width, ctx.batch_size, devices[0])
        steps = jax_steps(model, variables, x, devices)
        section.add_shares({"backend": "dp_jax explicit", "model": f"mlp{width}"}, measure_shares(steps, ctx.settings))
    return section
