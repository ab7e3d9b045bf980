"""Verdicts on what a pair declares: one-sided leaves, unused parameters, known differences.

- Torch-only / Flax-only names and output paths (`ModelPair.torch_only`/`flax_only`) are left out
  of the cross-framework comparisons and listed in the report's notes, with what they matched.
- A parameter the loss does not reach has no torch gradient (None) and a zero JAX gradient; the
  `unused_parameters` check says so, and fails if JAX gives such a parameter a non-zero gradient.
- A known difference that is not data parallelism (`KNOWN_DIFFERENCES`) is measured as its own
  check, which passes when the measurement is what the difference predicts.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from comparisons.judge import _padding_row
from comparisons.judge._bounds import Bounds, Sides
from comparisons.judge._numerics import compare_trees, flatten
from comparisons.verdicts import Check

_TORCH_BN_MOMENTUM = 0.1  # torch.nn.BatchNorm's default; transformers' models keep it


def cross(pair: Any, subject: str, jax_value: Any, torch_value: Any) -> Sides:
    """The two sides of a torch-vs-JAX check, without declared one-sided leaves or known differences."""
    return Sides(*reversed(_cross(pair, subject, jax_value, torch_value)))


def _cross(pair: Any, subject: str, jax_value: Any, torch_value: Any) -> tuple[Any, Any]:
    """(JAX side, torch side) of `cross`."""
    if subject == "outputs":
        return _drop(jax_value, pair.is_flax_only), _drop(torch_value, pair.is_torch_only)
    if _padding_row.applies(pair, subject):  # row p is measured on its own (padding_row_checks)
        jax_value = _padding_row.without_rows(pair, jax_value)
        torch_value = _padding_row.without_rows(pair, torch_value)
    if subject == "gradients" and "frozen_in_torch" in pair.known_differences and pair.frozen:
        jax_value = _drop(jax_value, lambda path: path in pair.frozen)  # one-sided: frozen_checks measures it
        torch_value = _drop(torch_value, lambda path: path in pair.frozen)
    if subject == "gradients" and _one_sided_gradients(pair):
        torch_side = flatten(torch_value)
        return _drop(jax_value, lambda path: path not in torch_side), torch_side
    if subject == "batch_stats" and "flax_batchnorm_biased_var" in pair.known_differences:
        def is_var(path: str) -> bool:
            return path.endswith(".var") or path == "var"
        return _drop(jax_value, is_var), _drop(torch_value, is_var)
    return jax_value, torch_value


def island_checks(pair: Any, runs: list, reference: Any, checks: list[Check]) -> list[Check]:
    """For `float32_islands`: the float64 runs' max |torch - JAX| of the outputs, measured, one check per
    JAX run that passes when that run's torch-vs-JAX outputs check does (judged at float32's bound)."""
    if "float32_islands" not in pair.known_differences or reference is None:
        return []
    sides = cross(pair, "outputs", reference.jax.outputs, reference.torch.outputs)
    jax64, torch64 = sides.flax, sides.torch
    shared = [p for p in jax64 if p in torch64 and np.shape(jax64[p]) == np.shape(torch64[p])]
    gap = max((float(np.abs(np.asarray(jax64[p], np.float64) - np.asarray(torch64[p], np.float64)).max())
               for p in shared), default=0.0)
    found = []
    for run in runs[1:]:
        outputs = next((c for c in checks if c.subject == "outputs" and c.compared == f"torch DP vs {run.label} DP"),
                       None)
        ok = outputs is not None and outputs.passed
        found.append(Check("known_difference", f"torch vs {run.label}: float32 islands", ok, gap, None, None,
                           f"known difference, not data parallelism: float64 runs differ by max |Δ| {gap:.3g} in the "
                           "outputs, as float32 rounding of the part each framework keeps in float32; judged at "
                           "float32's bound" + ("" if ok else "; the outputs differ beyond it")))
    return found


def _drop(tree: Any, declared) -> dict:
    flat = flatten(tree)
    return {path: leaf for path, leaf in flat.items() if not declared(path)}


def checks(pair: Any, runs: list, tol: float, inputs: tuple | None = None) -> list[Check]:
    """The unused-parameter check and one check per declared known difference, for each JAX run, at the
    rtol `tol` (`inputs`: the run's, which tell whether a padding row's difference is explained)."""
    torch_run, found = runs[0], []
    # DataParallel gives such a parameter a zero gradient (replicate's backward sums zeros); a
    # single-device run leaves it None, so the reference run is the one that tells.
    unused = tuple(dict.fromkeys([*torch_run.single.unused_parameters, *torch_run.dp.unused_parameters]))
    unused = tuple(name for name in unused if not _frozen(pair, name, flatten(torch_run.dp.gradients)))
    found += [_frozen_check(pair, run, tol) for run in runs[1:] if pair.frozen
              and "frozen_in_torch" in pair.known_differences]
    if unused:
        found += [_unused_check(pair, unused, run, tol) for run in runs[1:]]
    if "flax_batchnorm_biased_var" in pair.known_differences and pair.has_batch_stats:
        found += [_biased_var_check(torch_run, run, tol) for run in runs[1:]]
    return found + _padding_row.padding_row_checks(pair, runs, inputs, tol)


def _frozen(pair: Any, name: str, grads: dict) -> bool:
    """Whether torch parameter `name` is one the pair declares frozen in torch (not unused: frozen_checks)."""
    leaves = _flax_leaves_of(pair, name, grads)
    return bool(leaves) and "frozen_in_torch" in pair.known_differences and set(leaves) <= set(pair.frozen)


def _frozen_check(pair: Any, run: Any, tol: float) -> Check:
    """The Flax gradient of the parameters torch freezes, reported one-sided (torch has none to compare)."""
    grads = flatten(run.dp.gradients)
    sizes = {path: float(np.abs(grads[path]).max()) if path in grads else None for path in pair.frozen}
    missing = [path for path, size in sizes.items() if size is None]
    shown = ", ".join(f"{path} |grad| {size:.3g}" for path, size in sizes.items() if size is not None)
    detail = (f"known difference, not data parallelism: torch freezes {', '.join(pair.frozen)} (requires_grad=False); "
              f"{run.label}'s gradient, reported one-sided: {shown or 'none'}; its optimizer leaves them unchanged, as "
              "torch.optim does, so the parameters after every step are compared as usual")
    if missing:
        detail += f"; no Flax gradient for {', '.join(missing)}: the mapping names no such leaf"
    return Check("known_difference", f"torch vs {run.label}: frozen in torch", not missing,
                 max((v for v in sizes.values() if v is not None), default=None), None, tol, detail)


def _unused_check(pair: Any, unused: tuple[str, ...], run: Any, tol: float) -> Check:
    """torch: no .grad; JAX: the gradient of each such parameter's Flax leaf must be exactly zero.

    Judged per parameter: an unused mask token beside a used cls token in one layer (DINOv2's
    embeddings) passes. A parameter with no single Flax leaf (an MHA's packed projections) is
    judged on every leaf of its layer.
    """
    grads = flatten(run.dp.gradients)
    nonzero = {}
    for name in unused:
        for path in _flax_leaves_of(pair, name, grads):
            if np.any(grads[path] != 0):
                nonzero[path] = float(np.abs(grads[path]).max())
    names = ", ".join(unused[:6]) + (f" (+{len(unused) - 6} more)" if len(unused) > 6 else "")
    if nonzero:
        worst = max(nonzero, key=nonzero.get)
        return Check("unused_parameters", f"torch vs {run.label}", False, nonzero[worst], None, tol,
                     f"torch gives {names} no gradient but {run.label} gives {worst} |grad| {nonzero[worst]:.3g}: "
                     "the Flax model uses a parameter the torch model does not")
    return Check("unused_parameters", f"torch vs {run.label}", True, 0.0, None, tol,
                 f"{len(unused)} parameter(s) take no part in the loss: {names} (torch single-device: no .grad, "
                 f"compared as zero; torch DataParallel: zero; {run.label}: exactly zero)")


def _flax_leaves_of(pair: Any, name: str, grads: dict) -> list[str]:
    """The Flax gradient paths of torch parameter `name`: its own leaf, else its layer's leaves."""
    from comparisons.convert import flax_leaf

    leaf = flax_leaf(pair.mapping, name)
    if leaf is None:
        return []  # a parameter of a module the mapping leaves out (declared torch-only): no Flax twin
    if leaf.path in grads:
        return [leaf.path]
    return [path for path in grads if not leaf.prefix or path == leaf.prefix or path.startswith(leaf.prefix + ".")]


def _biased_var_check(torch_run: Any, run: Any, tol: float) -> Check:
    """Flax's running var vs torch's: the new-batch terms must differ by one factor n/(n-1) per layer.

    With momentum m, initial v0 and chunk 0's biased batch variance b: torch keeps (1-m) v0 +
    m b n/(n-1), Flax (1-m) v0 + m b. The ratio of the new-batch terms, per channel, gives n; it
    must be one value per layer (the layer's rows x positions in chunk 0).
    """
    m, label = _TORCH_BN_MOMENTUM, f"torch vs {run.label}: BatchNorm running var"
    torch_var, jax_var = flatten(torch_run.dp.batch_stats), flatten(run.dp.batch_stats)
    initial = flatten(run.initial_batch_stats if run.initial_batch_stats is not None else {})
    keys = [k for k in torch_var if k.endswith("var") and k in jax_var and k in initial]
    if not keys:
        return Check("known_difference", label, False, detail="no running variance on both sides to measure")
    raw = max(float(np.abs(torch_var[k].astype(np.float64) - jax_var[k]).max()) for k in keys)
    counts, inconsistent = {}, []
    for key in keys:
        v0 = initial[key].astype(np.float64)
        flax_term, torch_term = jax_var[key] - (1 - m) * v0, torch_var[key] - (1 - m) * v0
        measurable = np.abs(flax_term) > 1e-6 * np.maximum(np.abs(v0), 1.0)  # a constant channel has no batch term
        if not measurable.any():
            continue
        ratio = torch_term[measurable] / flax_term[measurable]
        with np.errstate(divide="ignore", invalid="ignore"):
            n = ratio / (ratio - 1)
        counts[key] = float(np.median(n))
        if not (np.all(np.isfinite(n)) and np.allclose(n, counts[key], rtol=1e-2)):
            inconsistent.append(key)
    if not counts:
        return Check("known_difference", label, False, raw, None, tol,
                     "no channel has a batch-variance term to measure the difference on")
    low, high = min(counts.values()), max(counts.values())
    detail = (f"known difference, not data parallelism: Flax keeps the biased variance; max |torch - Flax| = "
              f"{raw:.3g}; implied n/(n-1) with n = {low:.0f}..{high:.0f} rows x positions per layer "
              f"(momentum {m})")
    if inconsistent:
        detail += f"; not one factor per channel in {inconsistent[:3]}: another difference is there"
    return Check("known_difference", label, not inconsistent, raw, None, tol, detail)


def notes(pair: Any, runs: list) -> list[str]:
    """What the torch-only / Flax-only declarations matched, in the torch and the first JAX run."""
    torch_paths = _paths(runs[0])
    jax_paths = _paths(runs[1]) if len(runs) > 1 else []
    tied = dict(getattr(pair, "tied", ()))
    found = [_tied_note(tied)] if tied else []
    for side, patterns, paths, matches in (("torch", pair.torch_only, torch_paths, pair.is_torch_only),
                                           ("Flax", pair.flax_only, jax_paths, pair.is_flax_only)):
        if not patterns:
            continue
        hit = sorted({p for p in paths if matches(p) and p not in tied})
        shown = ", ".join(hit[:8]) + (f" (+{len(hit) - 8} more)" if len(hit) > 8 else "")
        found.append(f"{side}-only (declared, not compared across frameworks): {shown or 'nothing matched'}; "
                     f"patterns {list(patterns)}")
    return found


def _tied_note(tied: dict[str, str]) -> str:
    pairs = [f"{alias} = {canonical}" for alias, canonical in tied.items()]
    shown = "; ".join(pairs[:8]) + (f" (+{len(pairs) - 8} more)" if len(pairs) > 8 else "")
    return ("tied (one torch tensor under two names, converted and compared once, under the name after '='; its "
            f"gradient is torch's sum over both uses): {shown}")


def _paths(run: Any) -> list[str]:
    names = {r.path for r in run.placement if r.role in ("param", "buffer")}
    return sorted(names | set(flatten(run.dp.outputs)))


def conversion_checks(pair: Any, seed: int, dtype: str, *, built: Any = None) -> list[Check]:
    """Variables converted by another tool (`pair.variables`) against this pair's own conversion, bitwise.

    The compared run uses the given variables; this says whether they are the torch weights. `built`: the
    pair as the comparison built it (seed, dtype), else it is built here.
    """
    if pair.variables is None:
        return []

    torch_module, flax_module, given = built if built is not None else pair.build(seed=seed, dtype=np.dtype(dtype))
    ours = pair.torch_to_flax(torch_module.state_dict(), like=pair.flax_shapes(flax_module))
    check = compare_trees("conversion", "given variables vs the torch weights converted by path", given, ours,
                           Bounds(0.0, 0.0), sides=("the given variables", "ours"))
    if check.passed:
        check = dataclasses.replace(
            check, detail=f"bitwise equal ({len(flatten(ours))} leaves); the run uses the given variables")
    return [check]


def _one_sided_gradients(pair) -> bool:
    """Whether a declared known difference leaves Flax gradients without a torch twin."""
    return bool({"torch_buffer_flax_parameter", "frozen_in_torch"} & set(pair.known_differences))
