"""What a mapped strategy refuses about an uneven batch: in uneven='pad' mode, what padding would
visibly change; in the default exact mode, collectives that cannot span a short chunk run apart.

uneven='pad' cannot see every change: a model that mixes rows inside its chunk (BatchNorm in
training mode, `a - a.mean(0)`, attention across the batch) still returns one row per row, so
padding passes every check here and silently changes the last chunk's rows. That is why it is
not the default.
"""
from __future__ import annotations

from typing import Any

import jax

from dp_jax._caches import module_cache
from dp_jax._errors import UsageError
from dp_jax.strategies.inputs import SplitArgs
from dp_jax.strategies.plan import ShardPlan, even_batch_sizes_near


def _padding_story(plan: ShardPlan, n_devices: int) -> str:
    return (f"uneven='pad' pads a batch of {plan.batch_size} rows on {n_devices} devices (replicas' chunks "
            f"{', '.join(map(str, plan.chunk_sizes))}) to {plan.padded_size} rows")


def _even_sizes(plan: ShardPlan, n_devices: int) -> str:
    below, above = even_batch_sizes_near(plan.batch_size, n_devices)
    return f"a batch size that splits into equal chunks (e.g. {below} or {above})"


def _pad_fixes(plan: ShardPlan, n_devices: int) -> str:
    return f"use uneven='exact' (the default), or {_even_sizes(plan, n_devices)}"


def check_padding_allowed(plan: ShardPlan, who: str, *, updates_collections: bool, axis_name: str | None,
                          uses_rngs: bool, n_devices: int) -> None:
    """Raise when padding could change a visible number: collections, collectives or random draws."""
    if not plan.pad_rows:
        return
    if uses_rngs:
        raise UsageError(
            f"{who}: {_padding_story(plan, n_devices)}, and the last replica's random draws (rngs, e.g. dropout "
            f"masks) would be drawn for the padded shape, which need not match the unpadded draws; "
            f"{_pad_fixes(plan, n_devices)}"
        )
    if updates_collections:
        raise UsageError(
            f"{who}: {_padding_story(plan, n_devices)}, and the updated (mutable) collections, e.g. BatchNorm "
            f"batch statistics, would include the padding rows; {_pad_fixes(plan, n_devices)}"
        )
    if axis_name is not None:
        raise UsageError(
            f"{who}: {_padding_story(plan, n_devices)}, and collectives over axis_name={axis_name!r} would include "
            f"the padding rows; {_pad_fixes(plan, n_devices)}"
        )


def check_outputs_grow(replica_fn: Any, variables: Any, split: SplitArgs, plan: ShardPlan, dim: int, *, who: str,
                       n_devices: int) -> None:
    """Raise unless every output leaf has one row per input row: abstract evaluation (no compute) at
    c and c+1 rows must give c and c+1 along `dim`. One shape alone can match by coincidence
    (`a.mean(0)` of a (c, c) chunk). Traces the model twice per new input shape; no compile."""
    if not plan.pad_rows:
        return
    c = plan.shard_size
    shapes = [_output_shapes(replica_fn, _abstract(variables), split.treedef, split.static, tuple(split.axes),
                             arrays_sig=_signature(split.arrays), rows=rows) for rows in (c, c + 1)]
    for (name, at_c), (_, at_c1) in zip(*shapes):
        axis = dim % len(at_c) if at_c else None
        if axis is None or len(at_c1) != len(at_c) or (at_c[axis], at_c1[axis]) != (c, c + 1):
            raise UsageError(
                f"{who}: {_padding_story(plan, n_devices)}, but output{name} does not grow with the chunk "
                f"(shape {at_c} for {c} rows and {at_c1} for {c + 1}, along dim={dim}), so the padding rows "
                f"would enter it and cannot be dropped; {_pad_fixes(plan, n_devices)}, or reduce over rows "
                "after the gather"
            )


def check_ragged_collectives(plan: ShardPlan, axis_name: str | None, who: str, n_devices: int) -> None:
    """Raise for collectives (axis_name) over unequal chunks: a pmean would weigh the short chunk as a full one."""
    if axis_name is None or plan.short_replica is None:
        return
    raise UsageError(
        f"{who}: a batch of {plan.batch_size} rows on {n_devices} devices splits into unequal chunks "
        f"{', '.join(map(str, plan.chunk_sizes))}, and collectives over axis_name={axis_name!r} "
        f"(BatchNorm(axis_name=...), lax.pmean) would weigh the short chunk as a full one; use "
        f"{_even_sizes(plan, n_devices)}, or drop axis_name "
        "(sync_collections=True averages the per-chunk statistics of every replica instead)"
    )


def _abstract(tree: Any) -> tuple[Any, tuple]:
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    return treedef, tuple((tuple(x.shape), str(x.dtype)) if hasattr(x, "shape") else ("static", x) for x in leaves)


def _signature(arrays: list[Any]) -> tuple:
    return tuple((tuple(x.shape), str(x.dtype)) for x in arrays)


@module_cache(maxsize=128)
def _output_shapes(replica_fn, variables_sig, treedef, static, axes, *, arrays_sig, rows) -> list[tuple[str, tuple]]:
    """(path, shape) of every output leaf of one replica on a chunk of `rows` rows (jax.eval_shape)."""
    var_treedef, var_leaves = variables_sig
    variables = var_treedef.unflatten([leaf[1] if leaf[0] == "static" else jax.ShapeDtypeStruct(*leaf)
                                       for leaf in var_leaves])
    arrays = [jax.ShapeDtypeStruct(shape[:axis] + (rows,) + shape[axis + 1:], dtype)
              for (shape, dtype), axis in zip(arrays_sig, axes)]
    split = SplitArgs(treedef, static, [], [])

    def output(variables, arrays):
        args, kwargs = split.rebuild(arrays)
        return replica_fn(variables, None, args, kwargs)[0]

    shaped = jax.eval_shape(output, variables, arrays)
    return [(jax.tree_util.keystr(path), tuple(leaf.shape))
            for path, leaf in jax.tree_util.tree_flatten_with_path(shaped)[0]]
