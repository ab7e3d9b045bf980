"""compare(pair, ...): run one model pair through dp_torch and dp_jax and judge every number and placement.

For torch and for each dp_jax strategy, a data-parallel pipeline and a single-device reference
train the same converted weights on the same inputs. Checks (each with a verdict):
outputs, gradients, BatchNorm running statistics (replica 0 = chunk 0 only) and parameters after
K optimizer steps — data-parallel vs single within each backend and torch vs JAX — and placement
(every replica's layers, input chunks, output, grads) torch vs JAX, plus replica-0 aliasing.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

from comparisons import judge
from comparisons import runs as run_support
from comparisons.errors import ComparisonError
from comparisons.harness import _arguments as check
from comparisons.harness._layers import add_layer_view, needs_layer_view
from comparisons.harness._trajectory import with_trajectory
from comparisons.placement import canonical_path
from comparisons.runs import (
    OPTIMIZERS,
    TORCH_DEVICES,
    BackendRun,
    Float64Reference,
    RunConfig,
    RunInputs,
    install_virtual,
    jax_devices,
    pair_inputs,
    torch_kind,
)
from comparisons.runs import torch_devices as torch_device_list
from comparisons.verdicts import ComparisonReport


class _StrategyNames(Sequence[str]):
    """dp_jax.STRATEGIES, read on first use: importing dp_jax loads JAX, which importing comparisons must not."""

    def __getitem__(self, index):
        from dp_jax import STRATEGIES
        return STRATEGIES[index]

    def __len__(self) -> int:
        from dp_jax import STRATEGIES
        return len(STRATEGIES)


STRATEGIES: Sequence[str] = _StrategyNames()


def compare(pair: Any, *, batch_size: int = 10, devices: int = 4, strategies: Sequence[str] | None = None,
            steps: int = 2, optimizer: str = "sgd", dtype: str = "float32", seed: int = 0,
            torch_devices: str = "auto", progress: Callable[[str, int], None] | None = None,
            padding: bool = False, precision: str = "float64-check", rtol: float | None = None,
            atol: float | None = None, layers: bool = False) -> ComparisonReport:
    """Compare dp_torch and dp_jax on `pair` (a ModelPair or a registered name); returns the report.

    Args:
      devices: number of devices; JAX uses jax.devices()[:devices].
      torch_devices: "auto" (the default, as in the CLI: "cuda" when torch sees `devices` GPUs, else
        "virtual", installing vdev:0..max(8, devices)-1 if none are: process-global), "cpu" (the CPU
        repeated), "virtual" (after your own dp_torch.virtual.install) or "cuda".
      strategies: dp_jax strategies; None = every strategy (each computes on exactly torch's chunks).
      steps: optimizer steps (>= 1); the first step's output/grads/statistics are checked.
      progress: called as progress(label, total_steps) after every training step (progress bars).
      padding: also train each chosen mapped strategy with the last chunk padded (dp_jax's
        uneven='pad_unchecked', what a pmap port computes) and report in the notes, labelled
        "padding", how far it moves each subject from torch's: measured, never judged.
      precision: "float64-check" (the default: a float32 run, and both frameworks' single-device run again
        in float64, which tells a port difference from rounding, leaf by leaf), "off" (the float32 run
        alone) or "float64" (everything in float64, as dtype="float64").
      rtol, atol: the element-wise bound |a - b| <= atol + rtol |b| of every leaf; None: rtol per dtype
        (1e-5, 1e-12) and atol derived per leaf (docs/report_schema.md#leaves).
      layers: add the layer view (every mapped layer torch beside Flax, the first divergence, each replica
        against one device on its chunk; docs/debugging_a_port.md). Without it, the view is added whenever a
        torch-vs-JAX check fails: one more forward per side (and per chunk for the replicas).
    Every argument is checked before any work runs. JAX gets max(8, devices) CPU devices when it
    has not started yet (else the error says how). Compiles one JAX program per strategy and chunk
    shape; float64 runs JAX under jax.enable_x64 (scoped to this call).
    """
    pair = check.model_pair(pair)
    check.choice("dtype", dtype, tuple(judge.TOLERANCES))
    dtype = "float64" if check.choice("precision", precision, PRECISIONS) == "float64" else dtype
    optimizer = check.choice("optimizer", optimizer, tuple(OPTIMIZERS))
    config = RunConfig(check.positive("batch_size", batch_size), check.positive("steps", steps), optimizer, dtype,
                       check.seed(seed), pair.batch_axis)
    rtol, atol = check.tolerance("rtol", rtol), check.tolerance("atol", atol)
    check.choice("torch_devices", torch_devices, ("auto", *TORCH_DEVICES))
    check.progress(progress)
    devices = check.positive("devices", devices)
    check.flag("layers", layers)
    if not isinstance(padding, bool):
        raise ComparisonError(f"compare: padding={padding!r} is not a bool; pass True to measure what padding "
                              "the last chunk would change, or False")
    chosen = check.strategies(check.strategy_names(strategies), STRATEGIES)
    if padding and _runs_elsewhere(pair):
        raise ComparisonError(f"compare: padding=True is not available for pair {pair.name!r}: its JAX side runs in "
                              "a worker process (traced by torchax); pass padding=False")
    check.fits_in_memory(pair, config)
    jax_list = jax_devices(devices)
    kind = torch_kind(torch_devices, devices)
    if torch_devices == "auto" and kind == "virtual":
        install_virtual(devices)
    torch_list, reference = torch_device_list(kind, devices)
    with run_support.light_compiles(jax_list) as light:
        report = ComparisonReport(
            model=pair.name, batch_size=batch_size, devices=devices, chunk_sizes=[], strategies=chosen,
            steps=steps, optimizer=optimizer, dtype=dtype, seed=seed, torch_devices=kind,
            tolerance=tolerance_record(dtype, precision, rtol, atol),
            precision="float64" if dtype == "float64" else precision,
            notes=[f"optimizer {optimizer}: {OPTIMIZERS[optimizer]} (torch.optim and optax alike)"])
        freed = run_support.free_programs_near_map_limit()
        if freed:
            report.notes.append(freed)
        if light:
            report.notes.append(run_support.LIGHT_COMPILES_NOTE)
        total = 2 * steps * (1 + len(chosen))  # DP and single-device, for torch and each strategy
        tick = (lambda label: progress(label, total)) if progress else (lambda label: None)
        in_float64 = _checks_in_float64(dtype, precision)
        run, runs, jax64 = _run_all(_inputs(pair, config), chosen, (torch_list, reference), jax_list, tick,
                                    in_float64)
        tol = report.tolerance["rtol"]
        float64 = _float64_reference(run, devices, jax_list[0], jax64) if in_float64 else None
        tolerance = judge.Tolerance(tol, atol, float64, cross_cause="port" if dtype == "float64" else None)
        report.chunk_sizes = runs[0].chunk_sizes
        report.checks = (judge.judge_runs(pair, runs, tolerance, run.inputs)
                         + judge.conversion_checks(pair, config.seed, dtype))
        report.drift = judge.drift(pair, runs, float64)
        report.placements = {run.label: run.placement for run in runs}
        report.layers = {layer.torch: canonical_path(layer.flax) for layer in pair.mapping}
        report.notes += [note for run in runs for note in run.notes] + judge.parametrisation_note(runs)
        report.notes += judge.declared_notes(pair, runs)
        if padding:
            report.notes += _padding_section(run, chosen, runs[0], jax_list, tol)
        if _runs_elsewhere(pair) and (layers or needs_layer_view(report.checks)):
            report.notes.append("layer view: not available when the JAX side runs in another process (a traced pair)")
        elif layers or needs_layer_view(report.checks):
            with jax_precision(dtype):
                add_layer_view(report, run, (torch_list, jax_list), (tol, atol), float64 is not None, asked=layers)
        return report


PRECISIONS = ("float64-check", "off", "float64")


def _checks_in_float64(dtype: str, precision: str) -> bool:
    """Whether a float32 run gets its float64 twin (dtype float64 is that check itself; "off" skips it)."""
    return dtype == "float32" and precision != "off"


def tolerance_record(dtype: str, precision: str, rtol: float | None = None, atol: float | None = None) -> dict:
    """A report's `tolerance`: the bounds used and where each came from (docs/report_schema.md)."""
    measured = _checks_in_float64(dtype, precision)
    derived = ("derived per leaf: 8 x the leaf's float32 rounding measured against the float64 run, at least "
               "8 ulps of the subject's largest |value|" if measured else
               f"derived per leaf: rtol x the leaf's largest |value|, at least 8 ulps ({dtype}) of the subject's "
               "largest |value|")
    return {"rtol": judge.TOLERANCES[dtype] if rtol is None else rtol,
            "rtol_source": f"default for {dtype}" if rtol is None else "set by the user",
            "atol": atol, "atol_source": derived if atol is None else "set by the user",
            "float64_rtol": judge.TOLERANCES["float64"] if measured else None}


def _float64_reference(run: RunInputs, chunks: int, jax_device, jax_side=None) -> Float64Reference:
    """Both frameworks' single-device run again in float64, on the same weights and the inputs cast (so the
    difference to the float32 run is the computation's rounding alone): one forward, backward and K steps
    per framework, not per strategy. torch computes on the CPU; JAX on the first JAX device, under x64,
    unless `jax_side` is that run already (a pair whose JAX side runs in a worker process)."""
    import dataclasses

    import numpy as np
    import torch

    from comparisons.runs.jax_run import run_jax_reference
    from comparisons.runs.torch_run import run_torch_reference

    def wider(x):
        return x.astype(np.float64) if np.issubdtype(np.asarray(x).dtype, np.floating) else x

    config = dataclasses.replace(run.config, dtype="float64")
    run64 = RunInputs(run.pair, config, tuple(wider(x) for x in run.inputs), wider(run.targets))
    torch_module, flax_module, variables = _build(run.pair, config)
    torch_side = run_torch_reference(run64, torch_module, chunks, torch.device("cpu"))
    if jax_side is not None:
        return Float64Reference(torch_side, jax_side)
    with jax_precision("float64"):
        jax_side = run_jax_reference(run64, flax_module, variables, jax_device, chunks)
    return Float64Reference(torch_side, jax_side)


def _padding_section(run: RunInputs, strategies, torch_run, jax_list, tol) -> list[str]:
    """What uneven='pad' (a pmap port) would change, as labelled notes (judge/_padding.py): measured against
    torch's DataParallel, never judged. Builds the pair again and trains once more per mapped strategy."""
    with jax_precision(run.config.dtype):
        return judge.padding_notes(run, _build(run.pair, run.config), torch_run, jax_list, strategies=strategies,
                                   tol=tol)


def _inputs(pair, config: RunConfig) -> RunInputs:
    import numpy as np

    inputs, targets = pair.make_inputs(config.batch_size, config.seed, np.dtype(config.dtype))
    pair_inputs(pair, inputs, config.batch_size)
    return RunInputs(pair, config, inputs, targets)


def _run_all(run: RunInputs, strategies, torch_side, jax_list, progress, float64: bool
             ) -> tuple[RunInputs, list[BackendRun], Any]:
    """torch's run on (its devices, its reference device), then one JAX run per strategy; `run` as they ran it
    (recording every step when it has several and the record fits, harness/_trajectory.py); and the float64 JAX
    reference when a pair runs its JAX side elsewhere (`run_jax_side`: the worker does both), else None."""
    from comparisons.runs.jax_run import run_jax
    from comparisons.runs.torch_run import run_torch

    torch_module, flax_module, variables = _build(run.pair, run.config)
    parameters = sum(p.numel() for p in torch_module.parameters())
    run, notes = with_trajectory(run, parameters, len(strategies), float64)
    runs = [run_torch(run, torch_module, *torch_side, progress=lambda: progress("torch"))]
    runs[0].notes += notes
    if _runs_elsewhere(run.pair):
        jax_runs, jax64 = run.pair.run_jax_side(run, list(strategies), len(jax_list), float64)
        for jax_run in jax_runs:
            for _ in range(2 * run.config.steps):
                progress(jax_run.label)
        return run, runs + jax_runs, jax64
    with jax_precision(run.config.dtype):
        for strategy in strategies:
            runs.append(run_jax(run, flax_module, variables, jax_list, strategy,
                                progress=lambda s=strategy: progress(f"jax:{s}")))
    return run, runs, None


def _runs_elsewhere(pair) -> bool:
    """Whether `pair` runs its JAX side itself, in another process (comparisons.traced: torchax's trace)."""
    return callable(getattr(pair, "run_jax_side", None))


def _build(pair, config):
    import numpy as np

    from comparisons.convert import ConversionError

    try:
        return pair.build(seed=config.seed, dtype=np.dtype(config.dtype))
    except ConversionError as error:
        raise ComparisonError(f"compare: pair {pair.name!r} cannot be converted: {error}") from None


@contextlib.contextmanager
def jax_precision(dtype: str):
    """float64 needs JAX's x64 mode; enable it for this block only (it is thread-local config)."""
    import jax

    with jax.enable_x64(dtype == "float64"), jax.default_matmul_precision("highest"):
        yield
