"""Section 1: dp_jax strategies against single-device `jax.jit` on the same global batch.

For each model width, device count and strategy we time `DataParallel(...).apply(variables, x)`
(forward) and `jax.grad` of a loss on its gathered output (forward+backward) against
`jax.jit(model.apply)` / `jax.jit(jax.grad(loss))` on device 0, alternating the two.
Two rows use no dp_jax code: 'reference' is plain `jax.jit` with NamedSharding and resident
replicated parameters, scatter and gather included (the bound the strategies can approach), and
'floor' is the same with the batch already sharded and the output left sharded (the split
computation alone: what n emulated devices cost on this machine before any transfer).
dp_jax's grad is eager (jax.grad around `apply`: its strategies place arrays on devices, which a
surrounding jit refuses), so on the default device count a diagnostic row compares it with an
eager grad of the jitted single-device forward too. On the default device count each strategy also
runs batch B-1 (uneven: one switch program, the short last chunk computed on its rows alone),
beside its even-batch row.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchmarks.context import Context
from benchmarks.models import flax_model_and_batch
from benchmarks.results import Section
from benchmarks.timing import measure_ratio

TARGETS = {"explicit": 1.5, "pmap": 1.1, "sharded": 1.1, "shard_map": 1.1, "reference": 1.1, "floor": 1.1}
REFERENCE = "reference"  # jax.jit + NamedSharding, params replicated once (benchmarks-only idiom)
FLOOR = "floor"  # the reference without its scatter and gather transfers: the split computation alone
# Diagnostic: dp_jax's eager jax.grad against an eager jax.grad of the jitted single-device forward,
# so the ratio shows dp_jax's own cost apart from the cost of differentiating eagerly.
EAGER = "fwd+bwd vs eager grad"


def loss_of(output: Any) -> Any:
    import jax.numpy as jnp

    return jnp.mean(output ** 2)


def strategy_names() -> tuple[str, ...]:
    """dp_jax.STRATEGIES (imported when asked: this module also runs, with fewer rows, without dp_jax)."""
    from dp_jax import STRATEGIES

    return STRATEGIES


def single_device(model: Any, variables: Any, x: Any) -> dict[str, Callable[[], Any]]:
    """Forward and forward+backward thunks of the single-device `jax.jit` baseline."""
    import jax

    forward = jax.jit(model.apply)
    grad = jax.jit(jax.grad(lambda v, x: loss_of(model.apply(v, x))))
    eager_grad = jax.grad(lambda v, x: loss_of(forward(v, x)))
    return {"fwd": lambda: jax.block_until_ready(forward(variables, x)),
            "fwd+bwd": lambda: jax.block_until_ready(grad(variables, x)),
            EAGER: lambda: jax.block_until_ready(eager_grad(variables, x))}


def mesh_shardings(devices: list) -> tuple[Any, Any]:
    """(replicated P(), rows P('data')) NamedShardings over a 1-D mesh of `devices`."""
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = Mesh(np.array(devices), ("data",))
    return NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))


def compute_floor(model: Any, variables: Any, x: Any, devices: list) -> dict[str, Callable[[], Any]]:
    """Only the split computation: params and batch already resident and sharded, output left sharded.

    What running one batch as n smaller per-device batches costs on this machine, before any
    transfer: on a CPU the emulated devices share the cores, and smaller matmuls are less efficient.
    """
    import jax

    replicated, rows = mesh_shardings(devices)
    params, batch_rows = jax.device_put(variables, replicated), jax.device_put(x, rows)
    forward = jax.jit(model.apply)
    grad = jax.jit(jax.grad(lambda v, x: loss_of(model.apply(v, x))))
    return {"fwd": lambda: jax.block_until_ready(forward(params, batch_rows)),
            "fwd+bwd": lambda: jax.block_until_ready(grad(params, batch_rows))}


def reference_sharded(model: Any, variables: Any, x: Any, devices: list) -> dict[str, Callable[[], Any]]:
    """Plain JAX data parallelism: params resident as P(), batch scattered P('data'), output to dev 0."""
    import jax

    replicated_sharding, rows = mesh_shardings(devices)
    replicated = jax.device_put(variables, replicated_sharding)
    forward = jax.jit(model.apply, out_shardings=rows)

    def apply(v: Any, x: Any) -> Any:
        return jax.device_put(forward(v, jax.device_put(x, rows)), devices[0])

    grad = jax.jit(jax.grad(lambda v, x: loss_of(model.apply(v, x))))
    return {"fwd": lambda: jax.block_until_ready(apply(replicated, x)),
            "fwd+bwd": lambda: jax.block_until_ready(grad(replicated, jax.device_put(x, rows)))}


def dp_jax_thunks(model: Any, variables: Any, x: Any, devices: list, strategy: str) -> dict[str, Callable[[], Any]]:
    """dp_jax.DataParallel forward, and eager `jax.grad` of the loss on its gathered output."""
    import jax

    import dp_jax

    dp = dp_jax.DataParallel(model, device_ids=devices, strategy=strategy)
    grad = jax.grad(lambda v, x: loss_of(dp.apply(v, x)))
    return {"fwd": lambda: jax.block_until_ready(dp.apply(variables, x)),
            "fwd+bwd": lambda: jax.block_until_ready(grad(variables, x))}


def dp_jax_missing() -> str | None:
    """Why dp_jax's DataParallel cannot be used, or None."""
    try:
        from dp_jax import DataParallel  # noqa: F401
    except ImportError as error:
        return f"dp_jax.DataParallel is not importable ({error})"
    return None


def thunks_for(strategy: str, model: Any, variables: Any, x: Any, devices: list) -> dict[str, Callable[[], Any]]:
    make = {FLOOR: compute_floor, REFERENCE: reference_sharded}.get(strategy)
    if make is not None:
        return make(model, variables, x, devices)
    return dp_jax_thunks(model, variables, x, devices, strategy)


def measure_strategy(section: Section, ctx: Context, labels: dict, thunks: dict, baseline: dict) -> None:
    """Add one row per mode of `thunks`, each timed against the baseline of the same mode."""
    strategy = labels["strategy"]
    if strategy in strategy_names() and labels["devices"] == ctx.n_devices and not ctx.quick:
        thunks = {**thunks, EAGER: thunks["fwd+bwd"]}
    add_rows(section, ctx, labels, thunks, baseline, lambda mode: None if mode == EAGER else TARGETS[strategy])


def add_rows(section: Section, ctx: Context, labels: dict, thunks: dict, baseline: dict,
             target: Callable[[str], float | None] = lambda mode: None) -> None:
    """One ratio row per mode of `thunks` against the baseline of the same mode; a failure is a row too."""
    for mode, thunk in thunks.items():
        try:
            ratio = measure_ratio(thunk, baseline[mode], ctx.settings)
        except Exception as error:  # a strategy that fails is a finding, not a crash
            section.add_failure({**labels, "mode": mode}, error)
            continue
        section.add_ratio({**labels, "mode": mode}, ratio, target(mode))


def run(ctx: Context) -> Section:
    section = Section(
        "jax_strategies", "dp_jax strategies vs single-device jax.jit",
        "t(strategy on n devices) / t(jax.jit on device 0), same global batch "
        f"{ctx.batch_size}; median [IQR] of {ctx.settings.reps} alternating repetitions",
    )
    missing = dp_jax_missing()
    if missing:
        section.notes.append(f"strategies not available: {missing}; only the floor and reference rows are measured")
    strategies = (FLOOR, REFERENCE) + (() if missing else strategy_names())
    devices = ctx.jax_devices()[:max(ctx.device_counts)]
    counts = [n for n in ctx.device_counts if n <= len(devices)]
    if len(counts) < len(ctx.device_counts):
        section.notes.append(f"device counts above {len(devices)} skipped: only {len(devices)} devices here")
    for width in ctx.strategy_widths:
        model, variables, x = flax_model_and_batch(width, ctx.batch_size, devices[0])
        baseline = single_device(model, variables, x)
        for n in counts:
            for strategy in strategies:
                labels = {"model": f"mlp{width}", "devices": n, "strategy": strategy}
                try:
                    thunks = thunks_for(strategy, model, variables, x, devices[:n])
                except Exception as error:
                    section.add_failure(labels, error)
                    continue
                measure_strategy(section, ctx, labels, thunks, baseline)
    measure_uneven(section, ctx, devices[:ctx.n_devices])
    add_over_reference(section)
    return section


def measure_uneven(section: Section, ctx: Context, devices: list) -> None:
    """Each strategy on batch B-1 (an uneven batch: the last chunk one row short) against jax.jit on
    the same B-1 rows, beside the even batch B's rows: what the one switch program (the short chunk
    computed on its rows alone) costs. Row label: the strategy with the batch, e.g.
    'pmap, batch 127'."""
    if dp_jax_missing() or len(devices) < 2:
        return
    batch = ctx.batch_size - 1
    for width in ctx.strategy_widths:
        model, variables, x = flax_model_and_batch(width, batch, devices[0])
        baseline = single_device(model, variables, x)
        for strategy in strategy_names():
            labels = {"model": f"mlp{width}", "devices": len(devices), "strategy": f"{strategy}, batch {batch}"}
            add_rows(section, ctx, labels, dp_jax_thunks(model, variables, x, devices, strategy), baseline)
    add_over_even(section, batch)


def add_over_even(section: Section, batch: int) -> None:
    """Each uneven row's median divided by the even row's of the same strategy, model and mode."""
    key = lambda labels, strategy: (labels["model"], labels["devices"], labels["mode"], strategy)  # noqa: E731
    even = {key(row["labels"], row["labels"]["strategy"]): row["ratio"]["median"] for row in section.rows
            if "ratio" in row and row["labels"]["strategy"] in strategy_names()}
    suffix = f", batch {batch}"
    for row in section.rows:
        strategy = row["labels"]["strategy"]
        if "ratio" in row and strategy.endswith(suffix):
            match = even.get(key(row["labels"], strategy[: -len(suffix)]))
            if match:
                row["derived"] = {"÷ even batch": row["ratio"]["median"] / match}


def add_over_reference(section: Section) -> None:
    """Each strategy row's median divided by the reference row's median of the same configuration.

    The quotient of two medians approximates dp_jax's cost over plain JAX on this machine (where
    even the reference pays for splitting the batch across emulated devices).
    """
    key = lambda labels: (labels["model"], labels["devices"], labels["mode"])  # noqa: E731
    strategies = strategy_names()
    reference = {key(row["labels"]): row["ratio"]["median"] for row in section.rows
                 if "ratio" in row and row["labels"]["strategy"] == REFERENCE}
    for row in section.rows:
        if "ratio" in row and row["labels"]["strategy"] in strategies and key(row["labels"]) in reference:
            row["derived"] = {"÷ reference": row["ratio"]["median"] / reference[key(row["labels"])]}
