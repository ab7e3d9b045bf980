"""The functions every JAX run differentiates, built in one place: DataParallel's apply, the chunked
single-device reference, and the loss around either.

An apply here is `(variables, x) -> (output, updated collections)` with x a tuple of Flax inputs; the
mutable collections are a tuple (hashable, so the builders can be cached) or False.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from comparisons.runs import _checks as check

Apply = Callable[[dict, tuple], tuple[Any, dict]]


def mutable_collections(pair: Any) -> tuple[str, ...] | bool:
    """The collections a training forward of `pair` updates: ('batch_stats',) or False."""
    return ("batch_stats",) if pair.has_batch_stats else False


def _split(result: Any, mutable: tuple[str, ...] | bool) -> tuple[Any, dict]:
    return result if mutable else (result, {})


def dp_apply(wrapper: Any, mutable: tuple[str, ...] | bool) -> Apply:
    """`wrapper.apply` (a dp_jax.DataParallel) in training mode, as an Apply: the one every DP run uses."""
    as_list = list(mutable) if mutable else False

    def apply(variables, x):
        return _split(wrapper.apply(variables, *x, train=True, mutable=as_list), mutable)
    return apply


def chunked_apply(flax_module: Any, sizes: tuple[int, ...], dim: int, mutable: tuple[str, ...] | bool) -> Apply:
    """The module on torch's chunks one after another on one device, keeping chunk 0's collections
    (what torch's replica 0 keeps), outputs joined along `dim`."""
    as_list = list(mutable) if mutable else False

    def apply(variables, x):
        offsets = np.cumsum([0, *sizes])
        outputs, collections = [], {}
        for i, (start, stop) in enumerate(zip(offsets[:-1], offsets[1:])):
            chunk = [jax.lax.slice_in_dim(a, int(start), int(stop), axis=dim) for a in x]
            output, updated = _split(flax_module.apply(variables, *chunk, train=True, mutable=as_list), mutable)
            outputs.append(output)
            collections = updated if i == 0 else collections
        return jax.tree.map(lambda *leaves: jnp.concatenate(leaves, dim), *outputs), collections
    return apply


def loss_with_output(loss_jax: Callable, apply: Apply, pair_name: str) -> Callable:
    """(variables, x, y) -> (loss, (output, updated)), the loss checked to be a scalar."""
    loss_of_output = _jitted(loss_jax)  # one program, not one eager dispatch per op

    def loss(variables, x, y):
        output, updated = apply(variables, x)
        return check.scalar_loss(pair_name, "loss_jax", loss_of_output(output, y)), (output, updated)
    return loss


def value_and_grad(loss_jax: Callable, apply: Apply, pair_name: str) -> Callable:
    """(params, state, x, y) -> ((loss, (output, updated state)), grads) for an Apply."""
    loss = loss_with_output(loss_jax, apply, pair_name)
    return jax.value_and_grad(lambda params, state, x, y: loss({"params": params, **state}, x, y), has_aux=True)


def reference_step(loss_jax: Callable, flax_module: Any, sizes: tuple[int, ...], dim: int,
                   mutable: tuple[str, ...] | bool, pair_name: str) -> Callable:
    """The jitted chunked reference, one per (loss, module, sizes, dim, mutable): a warm compare reuses it."""
    try:
        return _cached_reference_step(loss_jax, flax_module, sizes, dim, mutable, pair_name)
    except TypeError:  # a module with an unhashable field: build it afresh (and compile again)
        return _cached_reference_step.__wrapped__(loss_jax, flax_module, sizes, dim, mutable, pair_name)


@functools.lru_cache(maxsize=32)
def _cached_reference_step(loss_jax, flax_module, sizes, dim, mutable, pair_name):
    return jax.jit(value_and_grad(loss_jax, chunked_apply(flax_module, sizes, dim, mutable), pair_name))


@functools.lru_cache(maxsize=32)
def _jitted(fn):
    return jax.jit(fn)


def clear_caches() -> None:
    """Forget the cached reference steps and jitted losses (they hold the user's modules and losses)."""
    _cached_reference_step.cache_clear()
    _jitted.cache_clear()
