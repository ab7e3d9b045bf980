"""dp_jax.clear_caches empties every module cache of dp_jax, and no module cache escapes its registry."""
from __future__ import annotations

import ast
import pathlib

import jax.numpy as jnp
import numpy as np
from _helpers_jax import counting_compiles, devices

import dp_jax
from dp_jax._caches import REGISTRY

PACKAGE = pathlib.Path(dp_jax.__file__).parent


def _linear(variables, x):
    return x @ variables["w"]


def _fill_every_cache():
    """One call of each kind that caches: explicit, a padded mapped batch, a compiled step."""
    variables = {"w": np.ones((3, 2), np.float32)}
    x = np.arange(15, dtype=np.float32).reshape(5, 3)  # 2, 2, 1 on 4 devices
    dp_jax.DataParallel(_linear, devices(4), strategy="explicit").apply(variables, x)
    dp_jax.DataParallel(_linear, devices(4), strategy="pmap", uneven="pad").apply(variables, x)
    mapped = dp_jax.DataParallel(_linear, devices(4), strategy="shard_map")
    mapped.value_and_grad(lambda v, x: jnp.sum(mapped.apply(v, x)))(variables, x)
    from flax import nnx  # an NNX module's structure (dp_jax/nnx.py)

    dp_jax.DataParallel(nnx.Linear(3, 2, rngs=nnx.Rngs(0)), devices(2))(x)


def test_every_cache_is_filled_by_calls_and_emptied_by_clear_caches():
    _fill_every_cache()
    sizes = {cached.__qualname__: cached.cache_info().currsize for cached in REGISTRY}
    assert all(size > 0 for size in sizes.values()), sizes
    dp_jax.clear_caches()
    assert {cached.__qualname__: cached.cache_info().currsize for cached in REGISTRY} == dict.fromkeys(sizes, 0)


def test_after_clear_caches_the_next_call_compiles_again():
    variables, x = {"w": np.ones((3, 2), np.float32)}, np.ones((8, 3), np.float32)
    dp = dp_jax.DataParallel(_linear, devices(4), strategy="sharded")
    dp.apply(variables, x)
    with counting_compiles() as cached:
        dp.apply(variables, x)
    dp_jax.clear_caches()
    with counting_compiles() as cleared:
        dp.apply(variables, x)
    assert cached.count == 0 and cleared.count > 0


def _module_caches(tree: ast.AST) -> tuple[int, list[str]]:
    """(functions decorated with module_cache, every other lru_cache / functools.cache use)."""
    registered, bare = 0, []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for decorator in node.decorator_list:
                called = decorator.func if isinstance(decorator, ast.Call) else decorator
                name = called.attr if isinstance(called, ast.Attribute) else getattr(called, "id", "")
                registered += name == "module_cache"
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "functools":
            if node.attr in ("lru_cache", "cache"):
                bare.append(f"line {node.lineno}")
        if isinstance(node, ast.ImportFrom) and node.module == "functools":
            bare.extend(f"line {node.lineno}" for alias in node.names if alias.name in ("lru_cache", "cache"))
    return registered, bare


def test_every_module_cache_of_dp_jax_is_registered():
    registered, bare = 0, {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "_caches.py":  # the registry itself wraps functools.lru_cache
            continue
        count, uses = _module_caches(ast.parse(path.read_text()))
        registered += count
        if uses:
            bare[str(path.relative_to(PACKAGE))] = uses
    assert bare == {}, f"use dp_jax._caches.module_cache, not functools.lru_cache, so clear_caches sees it: {bare}"
    assert registered == len(REGISTRY) == 9
    assert "clear_caches" in dp_jax.__all__


def test_the_check_sees_a_bare_lru_cache_in_either_spelling():
    source = ("import functools\nfrom functools import lru_cache\n"
              "@functools.lru_cache(maxsize=8)\ndef f(): ...\n@module_cache(maxsize=8)\ndef g(): ...\n")
    assert _module_caches(ast.parse(source)) == (1, ["line 2", "line 3"])
