"""Shared helpers for the dp_jax pipeline tests (8 emulated CPU devices, set by conftest)."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import jax
import jax.monitoring
import jax.numpy as jnp
import numpy as np
from _chunks import torch_chunks

BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


def chunked_reference(apply, variables, x, n, *, rngs=None, **kwargs):
    """(output, chunk 0's collections or None): `apply` on one device, chunk by chunk as torch's
    DataParallel computes, outputs joined along rows. With `rngs` ({name: key}), chunk i draws from
    fold_in(key, i), as replica i does; `mutable=` in kwargs returns the collections."""
    outs, first = [], None
    for i, rows in enumerate(torch_chunks(len(x), n)):
        extra = dict(kwargs)
        if rngs is not None:
            extra["rngs"] = {name: jax.random.fold_in(key, i) for name, key in rngs.items()}
        result = apply(variables, jnp.asarray(x[rows]), **extra)
        out, collections = result if "mutable" in kwargs else (result, None)
        outs.append(out)
        first = collections if i == 0 else first
    return jnp.concatenate(outs), first


def devices(n: int) -> list[jax.Device]:
    """The first n emulated devices (all distinct)."""
    available = jax.devices()
    assert len(available) >= n, f"tests need {n} JAX devices; conftest should give 8"
    return available[:n]


def array_leaves(tree: Any) -> list[Any]:
    return [leaf for leaf in jax.tree_util.tree_leaves(tree) if isinstance(leaf, (jax.Array, np.ndarray))]


def assert_committed_to(tree: Any, device: jax.Device) -> None:
    """Every array leaf of `tree` is a jax.Array committed to exactly `device`."""
    leaves = array_leaves(tree)
    assert leaves, "expected at least one array leaf"
    for leaf in leaves:
        assert isinstance(leaf, jax.Array), type(leaf)
        assert leaf.committed, leaf
        assert leaf.devices() == {device}, (leaf.devices(), device)


def assert_trees_equal(actual: Any, expected: Any) -> None:
    """Same structure and bitwise-equal leaves (arrays compared by value, others by ==)."""
    assert jax.tree_util.tree_structure(actual) == jax.tree_util.tree_structure(expected)
    for a, e in zip(jax.tree_util.tree_leaves(actual), jax.tree_util.tree_leaves(expected)):
        if isinstance(e, (jax.Array, np.ndarray)):
            assert np.asarray(a).dtype == np.asarray(e).dtype
            np.testing.assert_array_equal(np.asarray(a), np.asarray(e))
        else:
            assert a is e


class CompileCounter:
    """Counts XLA backend compilations, through JAX's public monitoring events."""

    def __init__(self) -> None:
        self.count = 0

    def _listener(self, event: str, duration: float, **kwargs: Any) -> None:
        if event == BACKEND_COMPILE_EVENT:
            self.count += 1


@contextlib.contextmanager
def counting_compiles() -> Iterator[CompileCounter]:
    counter = CompileCounter()
    jax.monitoring.register_event_duration_secs_listener(counter._listener)
    try:
        yield counter
    finally:
        jax.monitoring.unregister_event_duration_listener(counter._listener)
