"""What padding would change, measured: the pair trained with dp_jax's uneven='pad_unchecked' (the last
chunk padded, as a hand-written pmap port does, and nothing refused) against PyTorch's DataParallel.

dp_jax's default computes on exactly torch's chunks, so the report's verdicts never see padding.
This section is for a user deciding how to port to pmap: it reports, subject by subject, how far
outputs, gradients, BatchNorm statistics and parameters after K steps move from PyTorch's when the
last chunk is padded. Measurements, not verdicts: they go into the report's notes, labelled
"padding", and never fail it.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from comparisons.judge import _declared as declared
from comparisons.judge._bounds import Bounds
from comparisons.judge._numerics import compare_trees
from comparisons.judge._runs import SUBJECTS
from comparisons.runs import BackendRun, RunInputs

MODE = "pad_unchecked"


def padding_notes(run: RunInputs, built: tuple[Any, Any, Any], torch_run: BackendRun, devices: Sequence[Any], *,
                  strategies: Sequence[str], bounds: Bounds) -> list[str]:
    """The padding section's lines: one headline, then one line per (mapped strategy, subject), each measured
    under `bounds` (its cause unused: nothing here is judged).

    `built` is the pair's (torch module, flax module, variables) as the comparison built them.
    Trains once more per mapped strategy among `strategies` ('pmap' when none is chosen), eagerly.
    """
    import dp_jax
    from comparisons.runs.jax_run import run_padded

    pair, config = run.pair, run.config

    mapped = [s for s in strategies if s in dp_jax.MAPPED_STRATEGIES] or ["pmap"]
    plan = dp_jax.DataParallel(built[1], list(devices), dim=config.dim, strategy=mapped[0],
                               uneven=MODE).plan(config.batch_size)
    head = (f"padding (what uneven='pad', a pmap port, would change; measured against torch DP, not judged): "
            f"batch {config.batch_size} on {len(devices)} devices")
    if not plan.pad_rows:
        return [f"{head} splits into equal chunks, so padding changes nothing"]
    short = plan.chunk_sizes[-1]
    lines = [f"{head} pads the last chunk ({short} row{'s' if short > 1 else ''}) with {plan.pad_rows} "
             f"cop{'ies' if plan.pad_rows > 1 else 'y'} of its last row to {plan.shard_size} rows"]
    _, flax_module, variables = built
    for strategy in mapped:
        padded = run_padded(run, flax_module, variables, devices, strategy)
        lines += [_line(check) for check in _measure(pair, padded, torch_run, strategy, bounds)]
    return lines


def _measure(pair, padded, torch_run, strategy, bounds: Bounds) -> list:
    snapshot, parameter_count = padded
    checks = []
    for subject in SUBJECTS:
        if subject == "batch_stats" and not pair.has_batch_stats:
            continue
        if subject == "params_after_steps" and parameter_count != torch_run.parameter_count:
            continue  # the two sides parametrise differently (see the report's note)
        sides = declared.cross(pair, subject, getattr(snapshot, subject), getattr(torch_run.dp, subject))
        checks.append(compare_trees(subject, f"torch DP vs jax:{strategy} padded", sides.flax, sides.torch,
                                    bounds._replace(cause=None)))
    return checks


def _line(check) -> str:
    where = "within" if check.passed else "beyond"
    return (f"padding: {check.subject}, {check.compared}: max_abs {check.max_abs:.2e}, rel_norm "
            f"{check.rel_norm:.2e} ({where} the tolerance {check.tolerance:g})")
