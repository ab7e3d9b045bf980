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

from comparisons import _arguments as check
from comparisons import _declared as declared
from comparisons._arguments import ComparisonError
from comparisons._backend_devices import TORCH_DEVICES, install_virtual, jax_devices, torch_kind
from comparisons._backend_devices import torch_devices as torch_device_list
from comparisons._numerics import TOLERANCES, compare_trees
from comparisons._runs import OPTIMIZERS, BackendRun, RunConfig
from comparisons.verdicts import Check, ComparisonReport


class _StrategyNames(Sequence[str]):
    """dp_jax.STRATEGIES, read on first use: importing dp_jax loads JAX, which importing comparisons must not."""

    def __getitem__(self, index):
        from dp_jax import STRATEGIES
        return STRATEGIES[index]

    def __len__(self) -> int:
        from dp_jax import STRATEGIES
        return len(STRATEGIES)


STRATEGIES: Sequence[str] = _StrategyNames()
_SUBJECTS = ("outputs", "gradients", "batch_stats", "params_after_steps")


def compare(pair: Any, *, batch_size: int = 10, devices: int = 4, strategies: Sequence[str] | None = None,
            steps: int = 2, optimizer: str = "sgd", dtype: str = "float32", seed: int = 0,
            torch_devices: str = "auto", progress: Callable[[str, int], None] | None = None,
            padding: bool = False) -> ComparisonReport:
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
    Every argument is checked before any work runs. JAX gets max(8, devices) CPU devices when it
    has not started yet (else the error says how). Compiles one JAX program per strategy and chunk
    shape; float64 runs JAX under jax.enable_x64 (scoped to this call).
    """
    pair = _resolve_pair(pair)
    config = RunConfig(check.positive("batch_size", batch_size), check.positive("steps", steps),
                       _choice("optimizer", optimizer, tuple(OPTIMIZERS)),
                       _choice("dtype", dtype, tuple(TOLERANCES)), check.seed(seed), pair.batch_axis)
    _choice("torch_devices", torch_devices, ("auto", *TORCH_DEVICES))
    check.progress(progress)
    devices = check.positive("devices", devices)
    if not isinstance(padding, bool):
        raise ComparisonError(f"compare: padding={padding!r} is not a bool; pass True to measure what padding "
                              "the last chunk would change, or False")
    chosen = _strategies(check.strategy_names(strategies), pair, config.batch_size, devices)
    jax_list = jax_devices(devices)
    kind = torch_kind(torch_devices, devices)
    if torch_devices == "auto" and kind == "virtual":
        install_virtual(devices)
    torch_list, reference = torch_device_list(kind, devices)
    report = ComparisonReport(
        model=pair.name, batch_size=batch_size, devices=devices, chunk_sizes=[], strategies=chosen,
        steps=steps, optimizer=optimizer, dtype=dtype, seed=seed, torch_devices=kind,
        tolerance={"max_abs": TOLERANCES[dtype], "rel_norm": TOLERANCES[dtype]},
        notes=[f"optimizer {optimizer}: {OPTIMIZERS[optimizer]} (torch.optim and optax alike)"])
    total = 2 * steps * (1 + len(chosen))  # DP and single-device, for torch and each strategy
    tick = (lambda label: progress(label, total)) if progress else (lambda label: None)
    runs = _run_all(pair, config, chosen, torch_list, reference, jax_list, tick)
    report.chunk_sizes = runs[0].chunk_sizes
    report.checks = judge(pair, runs, TOLERANCES[dtype]) + declared.conversion_checks(pair, config.seed, dtype)
    report.placements = {run.label: run.placement for run in runs}
    report.layers = {layer.torch: layer.flax.replace("/", ".") for layer in pair.mapping}
    report.notes += [note for run in runs for note in run.notes] + _parametrisation_note(runs)
    report.notes += declared.notes(pair, runs)
    if padding:
        report.notes += _padding_section(pair, config, chosen, runs[0], jax_list, TOLERANCES[dtype])
    return report


def _padding_section(pair, config, strategies, torch_run, jax_list, tol) -> list[str]:
    """What uneven='pad' (a pmap port) would change, as labelled notes (comparisons/_padding.py):
    measured against torch's DataParallel, never judged. Builds the pair again and trains once
    more per mapped strategy."""
    from comparisons._padding import padding_notes

    with _jax_precision(config.dtype):
        return padding_notes(pair, config, strategies, torch_run, jax_list, _build(pair, config), tol)


def _run_all(pair, config, strategies, torch_list, reference, jax_list, progress) -> list[BackendRun]:
    import numpy as np

    from comparisons._jax_run import run_jax
    from comparisons._torch_run import run_torch

    torch_module, flax_module, variables = _build(pair, config)
    inputs, targets = pair.make_inputs(config.batch_size, config.seed, np.dtype(config.dtype))
    check.pair_inputs(pair, inputs, config.batch_size)
    runs = [run_torch(pair, torch_module, inputs, targets, torch_list, reference, config,
                      lambda: progress("torch"))]
    with _jax_precision(config.dtype):
        for strategy in strategies:
            runs.append(run_jax(pair, flax_module, variables, inputs, targets, jax_list, strategy,
                                config, lambda s=strategy: progress(f"jax:{s}")))
    return runs


def judge(pair: Any, runs: list[BackendRun], tol: float) -> list[Check]:
    """Every verdict: DP vs single per backend, torch vs each JAX strategy, placement, aliasing."""
    from comparisons._placement_checks import check_aliasing, compare_placement

    torch_run, checks = runs[0], []
    for subject in _SUBJECTS:
        if subject == "batch_stats" and not pair.has_batch_stats:
            continue
        for run in runs:
            checks.append(compare_trees(subject, f"{run.label} DP vs single", getattr(run.dp, subject),
                                        getattr(run.single, subject), tol))
        for run in runs[1:]:
            if subject == "params_after_steps" and run.parameter_count != torch_run.parameter_count:
                continue  # see _parametrisation_note
            checks.append(compare_trees(subject, f"torch DP vs {run.label} DP",
                                        *declared.cross(pair, subject, getattr(run.dp, subject),
                                                        getattr(torch_run.dp, subject)), tol))
    checks += _compiled_vs_eager(runs, tol)
    for run in runs[1:]:
        checks.append(Check("chunks", f"torch vs {run.label}", run.chunk_sizes == torch_run.chunk_sizes,
                            detail=f"chunk sizes {run.chunk_sizes} vs torch {torch_run.chunk_sizes}"))
        checks.append(compare_placement(pair, torch_run.placement, run.placement, run.label,
                                        padded_replica=run.padded_replica))
    checks += [check_aliasing(run.placement, run.label) for run in runs
               if any(r.replica is not None and r.role == "param" for r in run.placement)]
    return checks + declared.checks(pair, runs, tol)


def _compiled_vs_eager(runs: list[BackendRun], tol: float) -> list[Check]:
    """dp_jax's compiled step (what trained) against its eager path (jax.grad around apply)."""
    return [compare_trees(subject, f"{run.label} compiled step vs eager", getattr(run.dp, subject),
                          getattr(run.eager, subject), tol)
            for run in runs if run.eager is not None for subject in ("gradients", "params_after_steps")]


def _parametrisation_note(runs: list[BackendRun]) -> list[str]:
    torch_count, jax_count = runs[0].parameter_count, runs[-1].parameter_count
    if torch_count == jax_count:
        return []
    return [f"params_after_steps not compared across backends: torch trains {torch_count} parameters and "
            f"Flax {jax_count} (e.g. LSTM: torch's two biases per gate are one in Flax), so the same "
            "optimizer moves them differently; outputs and gradients are still compared"]


def _build(pair, config):
    import numpy as np

    from comparisons.convert import ConversionError

    try:
        return pair.build(seed=config.seed, dtype=np.dtype(config.dtype))
    except ConversionError as error:
        raise ComparisonError(f"compare: pair {pair.name!r} cannot be converted: {error}") from None


@contextlib.contextmanager
def _jax_precision(dtype: str):
    """float64 needs JAX's x64 mode; enable it for this block only (it is thread-local config)."""
    import jax

    with jax.enable_x64(dtype == "float64"), jax.default_matmul_precision("highest"):
        yield


def _resolve_pair(pair):
    from comparisons import models

    if isinstance(pair, str):
        try:
            return models.get(pair)
        except KeyError as error:
            raise ComparisonError(f"compare: {error.args[0]}") from None
    if not isinstance(pair, models.ModelPair):
        raise ComparisonError(f"compare: pair={pair!r} is neither a ModelPair nor a registered name; "
                              f"known names: {models.names()}")
    return pair


def _choice(name: str, value: Any, allowed: Sequence[str]) -> str:
    if value not in allowed:
        raise ComparisonError(f"compare: {name}={value!r} is not supported; use one of {', '.join(allowed)}")
    return value


def _strategies(strategies, pair, batch_size: int, devices: int) -> list[str]:
    if strategies is None:
        return list(STRATEGIES)
    chosen = list(dict.fromkeys(strategies))
    if not chosen:
        raise ComparisonError("compare: strategies=[] is empty; pass at least one of "
                              f"{', '.join(STRATEGIES)} (or None for all)")
    for strategy in chosen:
        _choice("strategy", strategy, STRATEGIES)
    return chosen
