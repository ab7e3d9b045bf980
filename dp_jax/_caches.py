"""The module-level caches of dp_jax, registered so that `clear_caches` cannot forget one.

Every module cache in dp_jax is made with `module_cache` (tests/test_jax_caches.py fails on a
bare functools.lru_cache). They hold user functions (apply_fn, loss closures' replicas), devices,
meshes and the compiled programs built from them.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

REGISTRY: list[Any] = []  # every module_cache, in the order the modules defined them


def module_cache(maxsize: int) -> Callable[[Callable[..., Any]], Any]:
    """functools.lru_cache(maxsize), recorded in REGISTRY for `clear_caches`."""
    def decorate(fn: Callable[..., Any]) -> Any:
        cached = functools.lru_cache(maxsize=maxsize)(fn)
        REGISTRY.append(cached)
        return cached
    return decorate


def clear_caches() -> None:
    """Empty every module-level cache of dp_jax: the next calls rebuild and recompile their programs.

    Frees what the caches hold (user functions, devices, meshes, compiled programs) once nothing
    else refers to them. A DataParallel's placed variables are its own: `dp.cache.clear()`. JAX's
    own caches are JAX's: `jax.clear_caches()`.
    """
    for cached in REGISTRY:
        cached.cache_clear()
