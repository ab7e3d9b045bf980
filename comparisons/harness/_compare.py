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
from typing import Any, NamedTuple

from comparisons import judge
from comparisons import runs as run_support
from comparisons.errors import ComparisonError
from comparisons.harness import _arguments as check
from comparisons.harness._layers import layer_view_fields, needs_layer_view
from comparisons.harness._settings import Settings
from comparisons.harness._trajectory import with_trajectory
from comparisons.models import Built, ModelPair
from comparisons.models.builtin import flax_api, in_flax_api
from comparisons.models.jax_nnx import NNXApply
from comparisons.placement import canonical_path
from comparisons.runs import (
    OPTIMIZERS,
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


def compare(pair: Any, *, batch_size: int = 10, devices: int = 4, strategies: Sequence[str] | None = None,
            steps: int = 2, optimizer: str = "sgd", dtype: str = "float32", seed: int = 0,
            torch_devices: str = "auto", progress: Callable[[str, int], None] | None = None,
            padding: bool = False, precision: str = "float64-check", rtol: float | None = None,
            atol: float | None = None, layers: bool = False, bench: bool = False,
            bench_steps: int = 10, flax: str | None = None) -> ComparisonReport:
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
      bench: once every check has passed, time one training step of every side (torch on one device,
        dp_torch's and stock torch's DataParallel, jax.jit on one device, each strategy eager and compiled, a
        hand-written jit + NamedSharding floor): the report's `bench` (docs/performance.md). A failed check
        gives no figure, and says why. bench_steps: the timed steps per side (interleaved; default 10).
      flax: which Flax API a built-in pair's JAX twin is written in: "nnx" (None, the default: what new code is
        written in) or "linen". A pair of your own runs in its own API; naming the other one is refused.
    Every argument is checked before any work runs (`Settings`). JAX gets max(8, devices) CPU devices when it
    has not started yet (else the error says how). Compiles one JAX program per strategy and chunk
    shape; float64 runs JAX under jax.enable_x64 (scoped to this call).
    """
    pair = check.model_pair(pair)
    settings = Settings(batch_size=batch_size, devices=devices, strategies=strategies, steps=steps,
                        optimizer=optimizer, dtype=dtype, seed=seed, torch_devices=torch_devices, padding=padding,
                        precision=precision, rtol=rtol, atol=atol, layers=layers, bench=bench, bench_steps=bench_steps,
                        flax=flax, progress=progress)
    return compare_settings(pair, settings)


def compare_settings(pair: ModelPair | str, settings: Settings) -> ComparisonReport:
    """compare() on `pair` (a ModelPair or a registered name) and its Settings: devices -> runs -> verdicts ->
    notes, and one report built at the end."""
    pair = in_flax_api(check.model_pair(pair), settings.flax)
    for asked in ("padding", "bench"):
        if getattr(settings, asked) and pair.jax_side.in_worker:
            raise ComparisonError(f"compare: {asked}=True is not available for pair {pair.name!r}: its JAX side runs "
                                  f"in a worker process (traced by torchax); pass {asked}=False")
    config = settings.run_config(pair.batch_axis)
    check.fits_in_memory(pair, config)
    devices = _devices(settings)
    with run_support.light_compiles(devices.jax) as light:
        notes = _opening_notes(settings, light)
        pair, built = _build(pair, config)
        runs = _run_all(_inputs(pair, config), built, settings, devices)
        verdicts = _judge(runs, built, settings)
        notes += _notes(runs, built, settings, devices)
        view = _layer_view(runs, verdicts, settings, devices)
        return ComparisonReport(
            **settings.header(pair.name, devices.kind, flax_api(pair)), chunk_sizes=runs.runs[0].chunk_sizes,
            checks=verdicts.checks, drift=verdicts.drift, placements={run.label: run.placement for run in runs.runs},
            layers={layer.torch: canonical_path(layer.flax) for layer in pair.mapping},
            notes=notes + view.notes, bench=_bench(runs, built, verdicts, settings, devices, light), **view.fields)


class Devices(NamedTuple):
    """Where a comparison runs: torch's kind ("cuda", "virtual", "cpu"), its devices and reference device,
    and JAX's devices."""

    kind: str
    torch: list
    reference: Any
    jax: list


def _devices(settings: Settings) -> Devices:
    """Both frameworks' devices; "auto" on no GPUs installs virtual torch devices (process-global)."""
    jax_list = jax_devices(settings.devices)
    kind = torch_kind(settings.torch_devices, settings.devices)
    if settings.torch_devices == "auto" and kind == "virtual":
        install_virtual(settings.devices)
    torch_list, reference = torch_device_list(kind, settings.devices)
    return Devices(kind, torch_list, reference, jax_list)


class Runs(NamedTuple):
    """torch's run and each JAX strategy's (`runs`), the inputs as they ran (`run`), and the float64 reference
    (None without the float64 check)."""

    run: RunInputs
    runs: list[BackendRun]
    float64: Float64Reference | None


class Verdicts(NamedTuple):
    """Every check of the comparison and the torch-vs-JAX drift per step."""

    checks: list
    drift: list


def _judge(runs: Runs, built: Built, settings: Settings) -> Verdicts:
    """Every verdict on the runs, and the torch-vs-JAX drift per step."""
    pair = runs.run.pair
    bounds = judge.Bounds(settings.rtol_used, settings.atol, "port" if settings.dtype == "float64" else None)
    checks = (judge.judge_runs(pair, runs.runs, bounds, runs.float64, runs.run.inputs)
              + judge.conversion_checks(pair, settings.seed, settings.dtype, built=built))
    checks = judge.with_traps(checks, _nnx_traps(built, settings.dtype, pair.known_differences))
    return Verdicts(checks, judge.drift(pair, runs.runs, runs.float64, bounds))


def _nnx_traps(built: Built, dtype: str, declared: tuple[str, ...]) -> tuple:
    """The NNX traps (`judge.nnx_traps`) of the twin a comparison ran, for its failing leaves to name; empty unless
    the twin is NNX. Left out: a dtype fixed at construction (the runs reset it, `with_dtype`), and the biased
    running variance when the pair declares it (`flax_batchnorm_biased_var`: measured on its own)."""
    if not isinstance(built.flax, NNXApply):
        return ()
    left_out = {"fixed-dtype"} | ({"batchnorm-variance"} if "flax_batchnorm_biased_var" in declared else set())
    return tuple(trap for trap in judge.nnx_traps(built.flax.model, built.torch, dtype=dtype)
                 if trap.kind not in left_out)


def _opening_notes(settings: Settings, light: bool) -> list[str]:
    """The optimizer, and what this process does before the runs: programs freed near the map limit (now),
    light compiles."""
    freed = run_support.free_programs_near_map_limit()
    return [f"optimizer {settings.optimizer}: {OPTIMIZERS[settings.optimizer]} (torch.optim and optax alike)",
            *([freed] if freed else []), *([run_support.LIGHT_COMPILES_NOTE] if light else [])]


def _notes(runs: Runs, built: Built, settings: Settings, devices: Devices) -> list[str]:
    """The notes of the runs: each run's, the pair's declarations, and the padding section."""
    notes = [note for run in runs.runs for note in run.notes] + judge.parametrisation_note(runs.runs)
    notes += judge.declared_notes(runs.run.pair, runs.runs)
    if settings.padding:
        with jax_precision(settings.dtype):
            notes += judge.padding_notes(runs.run, built, runs.runs[0], devices.jax, strategies=settings.strategies,
                                         bounds=judge.Bounds(settings.rtol_used))  # atol derived, as ever
    return notes


class View(NamedTuple):
    """The layer view's report fields (none when it did not run) and the notes it adds."""

    fields: dict
    notes: list[str]


def _layer_view(runs: Runs, verdicts: Verdicts, settings: Settings, devices: Devices) -> View:
    """The layer view's report fields when asked or when a torch-vs-JAX check failed, and its notes."""
    if not (settings.layers or needs_layer_view(verdicts.checks)):
        return View({}, [])
    if not runs.run.pair.jax_side.captures_layers:
        return View({}, ["layer view: not available when the JAX side runs in another process (a traced pair)"])
    with jax_precision(settings.dtype):
        return View(*layer_view_fields(runs.run, verdicts.checks, judge.Sides(devices.torch, devices.jax),
                                       judge.Bounds(settings.rtol_used, settings.atol), runs.float64 is not None,
                                       asked=settings.layers))


def _bench(runs: Runs, built: Built, verdicts: Verdicts, settings: Settings, devices: Devices, light: bool
           ) -> dict | None:
    """The `bench` section when asked: every side timed once every check passed, else why there is no figure.
    Inside the comparison's light compiles when it has them (`light`): every JAX side then runs programs
    compiled alike, the strategies' from the runs and the floor's here."""
    from comparisons import bench

    if not settings.bench:
        return None
    if not all(check.passed for check in verdicts.checks):
        return bench.refused(verdicts.checks)
    with jax_precision(settings.dtype):
        return bench.measure(runs.run, built, devices, settings.strategies, settings.bench_steps, light=light)


def _float64_reference(run: RunInputs, built: Built, settings: Settings, jax_device: Any, jax_side=None
                       ) -> Float64Reference:
    """Both frameworks' single-device run again in float64, on the same weights and the inputs cast (so the
    difference to the float32 run is the computation's rounding alone): one forward, backward and K steps
    per framework, not per strategy. torch computes on the CPU, on a float64 copy of the built module; JAX on
    the first JAX device, under x64, on its weights converted again, unless `jax_side` is that run already (a
    pair whose JAX side runs in a worker process)."""
    import copy
    import dataclasses

    import numpy as np
    import torch

    from comparisons.runs.jax_run import run_jax_reference
    from comparisons.runs.torch_run import run_torch_reference

    def wider(x):
        return x.astype(np.float64) if np.issubdtype(np.asarray(x).dtype, np.floating) else x

    config = dataclasses.replace(run.config, dtype="float64")
    run64 = RunInputs(run.pair, config, tuple(wider(x) for x in run.inputs), wider(run.targets))
    torch_module = copy.deepcopy(built.torch).to(torch.float64)
    torch_side = run_torch_reference(run64, torch_module, settings.devices, torch.device("cpu"))
    if jax_side is not None:
        return Float64Reference(torch_side, jax_side)
    side = run.pair.jax_side
    variables = side.convert(run.pair, torch_module, built.flax, np.dtype("float64"))
    with jax_precision("float64"):
        jax_side = run_jax_reference(run64, built.flax, variables, jax_device, settings.devices)
    return Float64Reference(torch_side, jax_side)


def _inputs(pair, config: RunConfig) -> RunInputs:
    import numpy as np

    inputs, targets = pair.make_inputs(config.batch_size, config.seed, np.dtype(config.dtype))
    pair_inputs(pair, inputs, config.batch_size)
    return RunInputs(pair, config, inputs, targets)


def _run_all(run: RunInputs, built: Built, settings: Settings, devices: Devices) -> Runs:
    """torch's run on (its devices, its reference device), then one JAX run per strategy (in this process, or the
    pair's JAX side runs them in its worker, with the float64 JAX reference); `run` as they ran it (recording
    every step when it has several and the record fits, harness/_trajectory.py); the float64 reference."""
    from comparisons.runs.torch_run import run_torch

    parameters = sum(p.numel() for p in built.torch.parameters())
    strategies = list(settings.strategies)
    run, notes = with_trajectory(run, parameters, len(strategies), settings.in_float64)
    tick = _ticks(settings.progress, 2 * settings.steps * (1 + len(strategies)))  # DP and single, torch and each
    runs = [run_torch(run, built.torch, devices.torch, devices.reference, progress=lambda: tick("torch"))]
    runs[0].notes += notes
    side, jax64 = run.pair.jax_side, None
    if side.in_worker:
        jax_runs, jax64 = side.run_in_worker(run.pair, run, strategies, len(devices.jax), settings.in_float64)
        for jax_run in jax_runs:
            for _ in range(2 * run.config.steps):
                tick(jax_run.label)
        runs += jax_runs
    else:
        runs += _jax_runs(run, built, strategies, devices.jax, tick)
    float64 = _float64_reference(run, built, settings, devices.jax[0], jax64) if settings.in_float64 else None
    return Runs(run, runs, float64)


def _ticks(progress: Callable[[str, int], None] | None, total: int) -> Callable[[str], None]:
    return (lambda label: progress(label, total)) if progress else (lambda label: None)


def _jax_runs(run: RunInputs, built: Built, strategies: list[str], jax_list: list, tick) -> list[BackendRun]:
    from comparisons.runs.jax_run import run_jax

    runs: list[BackendRun] = []
    with jax_precision(run.config.dtype):
        for strategy in strategies:  # the single-device reference is every strategy's: trained once
            runs.append(run_jax(run, built.flax, built.variables, jax_list, strategy,
                                progress=lambda s=strategy: tick(f"jax:{s}"), single=runs[0].single if runs else None))
    return runs


def _build(pair: ModelPair, config: RunConfig) -> tuple[ModelPair, Built]:
    """The pair built once for the whole comparison (the runs, the float64 twin, padding, the conversion check),
    and the pair with what its declarations read from the built module (`ModelPair.build_declared`)."""
    import numpy as np

    from comparisons.convert import ConversionError

    try:
        return pair.build_declared(seed=config.seed, dtype=np.dtype(config.dtype))
    except ConversionError as error:
        raise ComparisonError(f"compare: pair {pair.name!r} cannot be converted: {error}") from None


@contextlib.contextmanager
def jax_precision(dtype: str):
    """float64 needs JAX's x64 mode; enable it for this block only (it is thread-local config)."""
    import jax

    with jax.enable_x64(dtype == "float64"), jax.default_matmul_precision("highest"):
        yield
