"""The batch size of a set of input leaves, and `dim` wrapped per leaf: one check for every path.

Shared by scatter/scatter_kwargs and the mapped strategies, so a bad batch reads the same wherever
it is caught. Leaves are labelled by argument name and pytree path, e.g. "args[1]['mask']".
"""
from __future__ import annotations

import operator
from typing import Any

import jax

from dp_jax._devices import is_array_leaf
from dp_jax._errors import UsageError, UsageTypeError


def check_dim(dim: Any, who: str) -> int:
    """`dim` as an int (anything with __index__ but bool), or a TypeError naming it; checked when given."""
    try:
        if isinstance(dim, bool):
            raise TypeError
        return operator.index(dim)
    except TypeError:
        raise UsageTypeError(
            f"{who}: dim={dim!r} is not an int; pass the batch dimension as an int, e.g. dim=0 (dim=-1 for the last)"
        ) from None


def check_batch_size(batch_size: Any, who: str) -> int | None:
    """`batch_size` as an int >= 0 (0: torch's empty chunks on every device) or None (no array to split)."""
    if batch_size is None:
        return None
    try:
        if isinstance(batch_size, bool):
            raise TypeError
        rows = operator.index(batch_size)
    except TypeError:
        raise UsageTypeError(f"{who}: batch_size={batch_size!r} is not an integer; pass the number of rows, "
                             "e.g. batch_size=8 (None: no array to split)") from None
    if rows < 0:
        raise UsageError(f"{who}: batch_size={batch_size!r} is negative; pass the number of rows, an integer >= 0")
    return rows


def labelled_leaves(named_trees: dict[str, Any]) -> list[tuple[str, Any]]:
    """(label, leaf) for every leaf of the named trees, in flattening order: ("args[0]", x), ..."""
    return [(name + jax.tree_util.keystr(path), leaf)
            for name, tree in named_trees.items()
            for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]]


def common_batch(labelled: list[tuple[str, Any]], dim: int, who: str) -> int | None:
    """The size along `dim` shared by every array leaf (None when there are no arrays).

    Raises, naming the leaf, for a 0-dim array, an out-of-range dim, or a batch that differs.
    """
    first: tuple[str, int] | None = None
    for label, leaf in labelled:
        if not is_array_leaf(leaf):
            continue
        if leaf.ndim == 0:
            raise UsageError(
                f"{who}: leaf {label} is 0-dim (a scalar array) and cannot be split along dim {dim}; "
                "pass arrays with a batch dimension, or close over scalars in apply_fn"
            )
        size = leaf.shape[wrap_dim(dim, leaf.shape, label, who)]
        if first is None:
            first = (label, size)
        elif size != first[1]:
            raise UsageError(
                f"{who}: leaf {label} has batch {size} but {first[0]} has {first[1]} (dim={dim}); "
                f"all leaves split along dim {dim} must have the same size"
            )
    return None if first is None else first[1]


def wrap_dim(dim: int, shape: tuple[int, ...], label: str, who: str) -> int:
    """`dim` wrapped for an array of `shape` (negative counts from the end, as in torch)."""
    if not -len(shape) <= dim < len(shape):
        raise UsageError(
            f"{who}: dim={dim} is out of range for {label} with shape {tuple(shape)}; "
            f"pass dim in [{-len(shape)}, {len(shape) - 1}]"
        )
    return dim % len(shape)
