"""The padding-row known difference: torch's `padding_idx` row gets no gradient from its lookups, Flax's does.

`without_rows` takes row p of each declared table (`ModelPair.padding_rows`) out of a gradient or
parameter tree, on both sides, so the torch-vs-JAX check judges every other entry as before;
`padding_row_checks` then measures that row on its own, one check per JAX run: when the inputs hold p
it reports max |JAX - torch| there (the lookups' share torch leaves out) and passes; when they do not,
nothing explains a difference, so the row must agree to the tolerance like any other.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from comparisons.judge._numerics import flatten
from comparisons.verdicts import Check

KNOWN = "padding_row_gradient"
SUBJECTS = ("gradients", "params_after_steps")


def applies(pair: Any, subject: str) -> bool:
    """Whether `subject`'s torch-vs-JAX trees lose their padding rows for `pair`."""
    return subject in SUBJECTS and KNOWN in pair.known_differences and bool(pair.padding_rows)


def without_rows(pair: Any, tree: Any) -> dict:
    """`tree` flattened, each declared table's padding row set to zero (copies; other leaves as they are)."""
    flat = dict(flatten(tree))
    for path, row in pair.padding_rows:
        if path in flat and np.ndim(flat[path]) == 2 and 0 <= row < np.shape(flat[path])[0]:
            flat[path] = np.array(flat[path], copy=True)
            flat[path][row] = 0
    return flat


def padding_row_checks(pair: Any, runs: list, inputs: tuple | None, tol: float) -> list[Check]:
    """One known_difference check per JAX run on the declared padding rows of the first-step gradients."""
    if KNOWN not in pair.known_differences or not pair.padding_rows or inputs is None:
        return []
    ids = [np.asarray(x) for x in inputs if np.issubdtype(np.asarray(x).dtype, np.integer)]
    torch_grads = flatten(runs[0].dp.gradients)
    return [_check(pair, torch_grads, flatten(run.dp.gradients), ids, run.label, tol) for run in runs[1:]]


def _check(pair: Any, torch_grads: dict, jax_grads: dict, ids: list, label: str, tol: float) -> Check:
    compared = f"torch vs {label}: padding row gradient"
    measured, unexplained = [], []
    for path, row in pair.padding_rows:
        if path not in torch_grads or path not in jax_grads:
            return Check("known_difference", compared, False, detail=f"no gradient of {path} on both sides to measure")
        gap = float(np.abs(np.asarray(jax_grads[path], np.float64)[row] - torch_grads[path][row]).max())
        present = any(np.any(x == row) for x in ids)
        bound = tol * max(float(np.abs(torch_grads[path]).max()), 1.0)
        measured.append((gap, path, row, present))
        if not present and gap > bound:
            unexplained.append(f"{path} row {row} differs by {gap:.3g} (bound {bound:.2g}) though no input holds {row}")
    worst = max(measured)
    where = ", ".join(f"{p} row {r} ({'in the inputs' if present else 'not in the inputs'})"
                      for _, p, r, present in measured)
    detail = (f"known difference, not data parallelism: torch's padding_idx leaves the lookups of the padding token "
              f"out of its row's gradient, Flax's nn.Embed does not; max |JAX - torch| = {worst[0]:.3g} on {where}")
    if unexplained:
        detail += "; " + "; ".join(unexplained) + ": another difference is there"
    return Check("known_difference", compared, not unexplained, worst[0], None, tol, detail)
