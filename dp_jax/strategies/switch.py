"""The program of an uneven batch: one shard_map in which every device computes its own torch chunk.

A mapped strategy's own program needs equal shards. On a batch that splits into unequal chunks
(uneven='exact', eagerly or under jit) every mapped strategy runs this program instead: the batch
is laid out in one slot of c rows per device (`lay_out_slots`; the short chunk's slot is filled past
its rows with zeros), and on device i `lax.switch` on the replica index computes a full chunk, the
short chunk's rows alone, or nothing (a device past the last chunk, under jit). No padding row
enters a computation, and the uneven batch is still one program: one compile per batch shape and
one dispatch, as an even batch.

The short chunk's outputs are filled to a full chunk's shape for the stacked result; which output
leaves were filled is static and travels in the program's output treedef (`Filled`), so the
gather drops exactly those rows, with no host sync and no second trace.
"""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

from dp_jax._errors import UsageError, UsageTypeError
from dp_jax.strategies.mesh import mesh_of, spec_at
from dp_jax.strategies.table import Replica

FULL, SHORT, IDLE = 0, 1, 2  # what device i computes: a full chunk, the short last chunk, nothing


@dataclasses.dataclass(frozen=True)
class Filled:
    """Per output leaf: True when the short chunk's rows were filled up to c along `dim` (drop them at gather).

    A pytree node with no array leaves: it is returned by the program as part of its output
    structure, so it costs nothing at run time and is known as soon as the call returns.
    """

    leaves: tuple[bool, ...]


jax.tree_util.register_dataclass(Filled, data_fields=[], meta_fields=["leaves"])


def lay_out_slots(arrays: list[Any], axes: tuple[int, ...], replicas: int, c: int, stacked: bool) -> list[Any]:
    """Every array as `replicas` slots of c rows along its axis, zeros past the batch (no replica reads them);
    reshaped to (replicas, c) at the axis when `stacked`. numpy stays numpy; JAX arrays take one dispatch."""
    if all(isinstance(x, np.ndarray) for x in arrays):
        return [_slots(np, x, axis, replicas, c, stacked) for x, axis in zip(arrays, axes)]
    return _jax_slots(arrays, axes, replicas, c, stacked)


@functools.partial(jax.jit, static_argnums=(1, 2, 3, 4))
def _jax_slots(arrays: list[Any], axes: tuple[int, ...], replicas: int, c: int, stacked: bool) -> list[Any]:
    return [_slots(jnp, x, axis, replicas, c, stacked) for x, axis in zip(arrays, axes)]


def _slots(xp: Any, x: Any, axis: int, replicas: int, c: int, stacked: bool) -> Any:
    missing = replicas * c - x.shape[axis]
    if missing:
        widths = [(0, 0)] * x.ndim
        widths[axis] = (0, missing)
        x = xp.pad(x, widths)
    return x.reshape(x.shape[:axis] + (replicas, c) + x.shape[axis + 1:]) if stacked else x


def merge_slots(x: Any, axis: int, rows: int | None) -> Any:
    """The inverse of `lay_out_slots(..., stacked=True)` for one array: its (replicas, c) axes at `axis`
    merged into one, cut to the batch's `rows` (None: keep every slot row). The gather uses it too."""
    merged = x.reshape(x.shape[:axis] + (-1,) + x.shape[axis + 2:])
    return merged if rows is None else lax.slice_in_dim(merged, 0, rows, axis=axis)


class ShortChunkMismatch(Exception):
    """The short chunk's output differs from a full chunk's beyond its rows, found while tracing.

    The compiled program is cached without the caller's label, so the caller relabels it:
    `labelled(who)` is the error the user sees.
    """

    def __init__(self, kind: type[Exception], message: str):
        super().__init__(message)
        self.kind = kind

    def labelled(self, who: str) -> Exception:
        return self.kind(f"{who}: {self}")


def switch_program(replica: Replica, axes: tuple[int, ...], devices: tuple[jax.Device, ...], name: str, *,
                   sizes: tuple[int, ...], dim: int, stacked: bool) -> Callable:
    """(variables, arrays, keys) -> ((stacked outputs, stacked collections), Filled): device i of `devices`
    computes chunk i of `sizes` (or nothing past the last). Not jitted: the caller jits it, or is a trace.

    `arrays` come from `lay_out_slots` (stacked or not) sharded on `name` at their axis; `keys` hold
    one key per device on `name`. Callers cache the result (one compile per batch shape).
    """
    n = len(devices)
    kinds = np.array([FULL if s == sizes[0] else SHORT for s in sizes] + [IDLE] * (n - len(sizes)), np.int32)
    one_block = _switch_block(replica, axes, sizes, kinds, name, dim=dim, stacked=stacked)
    in_specs = (P(), [spec_at(a, name) for a in axes], P(name))
    return jax.shard_map(one_block, mesh=mesh_of(devices, name), in_specs=in_specs, out_specs=P(name),
                         check_vma=False)


def _switch_block(replica: Replica, axes: tuple[int, ...], sizes: tuple[int, ...], kinds: np.ndarray, name: str, *,
                  dim: int, stacked: bool) -> Callable:
    """One device's block: its slot of c rows, computed as a full chunk, the short chunk's rows alone, or not at all."""
    c, short = sizes[0], sizes[-1]

    def one_block(variables, arrays, rngs):
        rngs = None if rngs is None else jax.tree.map(lambda k: k[0], rngs)
        if stacked:
            arrays = [jnp.squeeze(x, axis) for x, axis in zip(arrays, axes)]

        def short_rows(arrays):
            return [lax.slice_in_dim(x, 0, short, axis=axis) for x, axis in zip(arrays, axes)]

        full_shapes = jax.eval_shape(replica, variables, arrays, rngs)
        filled = _filled(jax.eval_shape(replica, variables, short_rows(arrays), rngs)[0], full_shapes[0], dim, c,
                         short, len(sizes) - 1)

        def short_chunk(variables, arrays, rngs):
            out, collections = replica(variables, short_rows(arrays), rngs)
            return _fill(out, filled, dim, c), collections

        def idle(variables, arrays, rngs):
            return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), full_shapes)

        # an uneven batch always has a SHORT or an IDLE device, so the switch is never trivial
        index = jnp.asarray(kinds)[lax.axis_index(name)]
        result = lax.switch(index, [replica, short_chunk, idle], variables, arrays, rngs)
        return jax.tree.map(lambda leaf: leaf[None], result), filled
    return one_block


def _filled(short_out: Any, full_out: Any, dim: int, c: int, short: int, replica: int) -> Filled:
    """Which leaves of the short chunk's output have `short` rows along `dim` where a full chunk's have c;
    raises ShortChunkMismatch (what gather raises) for any other difference in structure, shape or dtype."""
    full_leaves, treedef = jax.tree_util.tree_flatten_with_path(full_out)
    other = jax.tree_util.tree_structure(short_out)
    if other != treedef:
        raise ShortChunkMismatch(UsageError, f"replica {replica} (the short last chunk) returned structure {other} "
                                 f"but replica 0 returned {treedef}; every replica must return the same pytree "
                                 "structure")
    flags = []
    for (path, spec), leaf in zip(full_leaves, treedef.flatten_up_to(short_out)):
        name = "output" + jax.tree_util.keystr(path)
        if leaf.dtype != spec.dtype:
            raise ShortChunkMismatch(UsageTypeError, f"{name} has dtype {leaf.dtype} in replica {replica} but "
                                     f"{spec.dtype} in replica 0; every replica must return the same dtype (cast "
                                     "inside apply_fn)")
        axis = dim % len(spec.shape) if spec.shape else None
        same_elsewhere = len(leaf.shape) == len(spec.shape) and all(
            a == b for i, (a, b) in enumerate(zip(leaf.shape, spec.shape)) if i != axis)
        grows = same_elsewhere and axis is not None and (leaf.shape[axis], spec.shape[axis]) == (short, c)
        if leaf.shape != spec.shape and not grows:
            raise ShortChunkMismatch(UsageError,
                f"{name} has shape {tuple(leaf.shape)} in replica {replica} but {tuple(spec.shape)} in "
                f"replica 0; shapes must match in every dimension except dim={dim} (the one gathered): return "
                "same-shaped outputs, or gather along the batch dim")
        flags.append(leaf.shape != spec.shape)
    return Filled(tuple(flags))


def _fill(out: Any, filled: Filled, dim: int, c: int) -> Any:
    """The short chunk's outputs written into zeros of a full chunk's rows along `dim` where `filled` says so.

    Not `jnp.pad`: XLA fuses a pad (or an update of known zeros, which it turns into one) with the
    model's last elementwise op, whose loop then runs over c rows and can round differently (1 ulp)
    from explicit's call on the short chunk. Zeros behind a barrier keep the model's output its own.
    """
    leaves, treedef = jax.tree_util.tree_flatten(out)

    def fill(leaf: Any) -> Any:
        shape = list(leaf.shape)
        shape[dim % leaf.ndim] = c
        zeros = lax.optimization_barrier(jnp.zeros(shape, leaf.dtype))
        return lax.dynamic_update_slice(zeros, leaf, (0,) * leaf.ndim)
    return treedef.unflatten([fill(leaf) if grow else leaf for leaf, grow in zip(leaves, filled.leaves)])


def short_chunk_views(views: list[Any], axes: list[int], short: int, stacked: bool) -> list[Any]:
    """The short chunk's own rows of its device's slot views (`lay_out_slots`' layout), as the program reads them."""
    return [lax.slice_in_dim(x, 0, short, axis=axis + stacked) for x, axis in zip(views, axes)]
