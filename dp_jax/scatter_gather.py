"""scatter, scatter_kwargs and gather over pytrees, with torch's chunk sizes.

The JAX twin of dp_torch/scatter_gather.py. Arrays (JAX or numpy) are split along `dim` into
`torch.chunk`-sized pieces and each piece is committed to its device; every other leaf is shared by
reference. gather moves each replica's output to one device and concatenates. Both steps are
differentiable (`device_put` and slicing/concatenation have transposes), so `jax.grad` flows back
through them to the original inputs and their original device.
"""
from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from dp_jax._batch import check_dim, common_batch, labelled_leaves, wrap_dim
from dp_jax._devices import DeviceLike, is_array_leaf, resolve_device, resolve_devices
from dp_jax._errors import UsageError, UsageTypeError
from dp_jax.nnx import refuse_nnx

SCALAR_GATHER_WARNING = (
    "Was asked to gather along dimension 0, but all input tensors were scalars; "
    "will instead unsqueeze and return a vector."
)


def chunk_sizes(batch: int, n: int) -> list[int]:
    """The sizes `torch.chunk(batch, n)` produces: ceil(batch / n) each, the last one smaller.

    So there may be fewer than n chunks (5 on 4 devices: [2, 2, 1]); batch 0 gives n empty chunks.
    """
    if batch == 0:
        return [0] * n
    size = -(-batch // n)
    return [min(size, batch - start) for start in range(0, batch, size)]


def scatter(inputs: Any, devices: Sequence[DeviceLike], dim: int = 0) -> list[Any]:
    """Split every array leaf of `inputs` along `dim` into torch-chunk-sized pieces, one per device.

    Copies (transfers) each piece to its device, committed there (splitting a JAX array compiles a
    small slicing program once per shape); non-array leaves are shared by reference. Returns one
    pytree per chunk, each with the structure of `inputs`: fewer entries than devices when the batch
    is small. All split leaves must have the same batch size.
    """
    refuse_nnx(inputs, "scatter(inputs=...)", "scatter splits the inputs along dim; send a model to every "
               "device with dp_jax.replicate(model, devices)")
    dim = check_dim(dim, "scatter")
    devices = resolve_devices(devices)
    batch = common_batch(labelled_leaves({"inputs": inputs}), dim, "scatter")
    return _scatter_tree(inputs, batch, devices, dim)


def scatter_kwargs(
    inputs: Sequence[Any], kwargs: dict[str, Any] | None, devices: Sequence[DeviceLike], dim: int = 0
) -> tuple[tuple[tuple[Any, ...], ...], tuple[dict[str, Any], ...]]:
    """Scatter positional and keyword arguments: (args per replica, kwargs per replica).

    Pads like torch: if kwargs give more entries, args are padded with (); otherwise kwargs are
    padded with {}. So non-array kwargs reach every device and can give replicas with no positional
    args, as in torch. Arrays in args and kwargs must share one batch size. Copies like `scatter`.
    """
    dim = check_dim(dim, "scatter_kwargs")
    devices = resolve_devices(devices)
    inputs, kwargs = tuple(inputs or ()), dict(kwargs or {})
    batch = common_batch(labelled_leaves({"args": inputs, "kwargs": kwargs}), dim, "scatter_kwargs")
    args_chunks = _scatter_tree(inputs, batch, devices, dim) if inputs else []
    kwargs_chunks = _scatter_tree(kwargs, batch, devices, dim) if kwargs else []
    if len(args_chunks) < len(kwargs_chunks):
        args_chunks += [()] * (len(kwargs_chunks) - len(args_chunks))
    elif len(kwargs_chunks) < len(inputs):  # torch compares with len(inputs), not len(args_chunks)
        kwargs_chunks += [{}] * (len(args_chunks) - len(kwargs_chunks))
    if len(args_chunks) != len(kwargs_chunks):
        raise UsageError(
            f"scatter_kwargs: the arrays in kwargs split into {len(kwargs_chunks)} chunks but the "
            f"non-array args are shared by all {len(args_chunks)} devices, so some replicas would get "
            "no kwargs (torch fails later in parallel_apply); pass a batch of at least len(devices), "
            "fewer devices, or array args"
        )
    return tuple(args_chunks), tuple(kwargs_chunks)


def gather(outputs: Sequence[Any], target_device: DeviceLike | str, dim: int = 0) -> Any:
    """Concatenate the replicas' outputs along `dim` on `target_device` (a Device, index, or "cpu").

    Copies (transfers) every output array to the target, then concatenates there; the result is
    committed to the target. Outputs must share one pytree structure (dicts, lists, tuples,
    namedtuples, None); all-scalar leaves gathered along dim 0 become a vector, with torch's warning.
    """
    dim = check_dim(dim, "gather")
    target = resolve_device(target_device, "target_device", allow_cpu_literal=True)
    outputs = list(outputs)
    if not outputs:
        raise UsageError("gather: outputs is empty; pass one output per replica")
    treedef = _common_structure(outputs)
    paths = [jax.tree_util.keystr(path) for path, _ in jax.tree_util.tree_flatten_with_path(outputs[0])[0]]
    per_replica = [treedef.flatten_up_to(output) for output in outputs]
    gathered = []
    for k, path in enumerate(paths):  # a plain loop keeps the warning's stacklevel on the caller
        gathered.append(_gather_leaf([leaves[k] for leaves in per_replica], path, target, dim))
    return treedef.unflatten(gathered)


# --- scatter helpers ---------------------------------------------------------------------------


def _scatter_tree(tree: Any, batch: int | None, devices: list, dim: int) -> list[Any]:
    """One copy of `tree` per chunk, its arrays split and placed; n copies when it has no arrays."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    has_arrays = any(is_array_leaf(leaf) for leaf in leaves)
    sizes = chunk_sizes(batch, len(devices)) if has_arrays else [None] * len(devices)
    per_leaf = [
        _place_chunks(leaf, sizes, dim, devices) if is_array_leaf(leaf) else [leaf] * len(sizes)
        for leaf in leaves
    ]
    return [treedef.unflatten([chunks[i] for chunks in per_leaf]) for i in range(len(sizes))]


def _place_chunks(leaf: Any, sizes: list[int], dim: int, devices: list) -> list[jax.Array]:
    """Split one array into `sizes` along `dim` and commit piece i to devices[i]."""
    axis = dim % leaf.ndim
    if len(sizes) == 1:
        pieces = [leaf]
    else:
        bounds = np.cumsum(sizes)[:-1].tolist()
        split = np.split if isinstance(leaf, np.ndarray) else jnp.split
        pieces = split(leaf, bounds, axis=axis)
    return jax.device_put(pieces, devices[: len(pieces)])


# --- gather helpers ----------------------------------------------------------------------------


def _common_structure(outputs: list) -> jax.tree_util.PyTreeDef:
    """The pytree structure every output shares; raises naming the first replica that differs."""
    treedef = jax.tree_util.tree_structure(outputs[0])
    for r, output in enumerate(outputs[1:], start=1):
        other = jax.tree_util.tree_structure(output)
        if other != treedef:
            raise UsageError(
                f"gather: outputs[{r}] has structure {other} but outputs[0] has {treedef}"
                f"{_path_difference(outputs[0], output, r)}; every replica must return the same "
                "pytree structure (same dict keys, sequence lengths and None positions)"
            )
    return treedef


def _path_difference(first: Any, other: Any, r: int) -> str:
    """A short description of the leaf paths present in one tree but not the other."""
    paths = [{jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(tree)[0]}
             for tree in (first, other)]
    missing, extra = sorted(paths[0] - paths[1]), sorted(paths[1] - paths[0])
    parts = [f"outputs[{r}] lacks {missing}"] if missing else []
    parts += [f"outputs[{r}] adds {extra}"] if extra else []
    return ("; " + ", ".join(parts)) if parts else ""


def _gather_leaf(leaves: list, path: str, target: jax.Device, dim: int) -> jax.Array:
    """Move one leaf of every replica to `target` and concatenate them along `dim`."""
    labels = [f"outputs[{r}]{path}" for r in range(len(leaves))]
    for label, leaf in zip(labels, leaves):
        if not is_array_leaf(leaf):
            raise UsageTypeError(
                f"gather: {label} is a {type(leaf).__name__} ({leaf!r:.40}), not an array; gather "
                "concatenates arrays only: return arrays from apply_fn (e.g. jnp.asarray(value)) "
                "or leave non-array results out of the gathered output"
            )
    _check_compatible(leaves, labels, dim)
    moved = jax.device_put(leaves, [target] * len(leaves))
    if leaves[0].ndim == 0:
        warnings.warn(SCALAR_GATHER_WARNING, UserWarning, stacklevel=3)
        return jnp.stack(moved)
    # lax, not jnp: the dtypes are equal (checked), and jnp's promotion binds an identity convert per
    # replica shape, which under an eager jax.grad is one program each that copies nothing new
    return lax.concatenate(moved, dim % leaves[0].ndim)


def _check_compatible(leaves: list, labels: list[str], dim: int) -> None:
    """Same rank, dtype and shape (except along `dim`) as replica 0, or a clear error."""
    first = leaves[0]
    if first.ndim == 0 and dim != 0 and all(leaf.ndim == 0 for leaf in leaves):
        raise UsageError(
            f"gather: {labels[0]} and the other replicas' values are scalars and dim={dim}; scalars "
            "can only be gathered along dim=0 (into a vector with one value per replica)"
        )
    axis = wrap_dim(dim, first.shape, labels[0], "gather") if first.ndim else 0
    for label, leaf in zip(labels[1:], leaves[1:]):
        if leaf.dtype != first.dtype:
            raise UsageTypeError(
                f"gather: {label} has dtype {leaf.dtype} but {labels[0]} has {first.dtype}; "
                "every replica must return the same dtype (cast inside apply_fn)"
            )
        same_elsewhere = leaf.ndim == first.ndim and all(
            a == b for i, (a, b) in enumerate(zip(leaf.shape, first.shape)) if i != axis
        )
        if not same_elsewhere:
            raise UsageError(
                f"gather: {label} has shape {tuple(leaf.shape)} but {labels[0]} has "
                f"{tuple(first.shape)}; shapes must match in every dimension except dim={dim} "
                f"(the one gathered): return same-shaped outputs, or gather along the batch dim"
            )


__all__ = ["chunk_sizes", "scatter", "scatter_kwargs", "gather", "SCALAR_GATHER_WARNING"]
