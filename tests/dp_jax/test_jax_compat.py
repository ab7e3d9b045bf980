"""dp_jax/_jax_compat.py, the one fence around JAX's private API, on the installed JAX."""
from __future__ import annotations

import builtins
import importlib.util
import pathlib
import threading

import jax
import jax.numpy as jnp
import numpy as np

import dp_jax._jax_compat as compat


def _seen_by(is_abstract):
    """What `is_abstract` says of a concrete array, numpy, a Python number, an eager grad tracer and a jit tracer."""
    seen = {"jax array": is_abstract(jnp.ones(2)), "numpy": is_abstract(np.ones(2)), "float": is_abstract(1.5)}

    def record(name):
        def f(x):
            seen[name] = is_abstract(x)
            return jnp.sum(x)
        return f
    jax.grad(record("eager grad tracer"))(jnp.ones(2))
    jax.jit(record("jit tracer"))(jnp.ones(2))
    jax.jit(jax.grad(record("grad tracer under jit")))(jnp.ones(2))
    return seen


EXPECTED = {"jax array": False, "numpy": False, "float": False,
            "eager grad tracer": False, "jit tracer": True, "grad tracer under jit": True}


def test_only_a_tracer_without_a_concrete_value_is_abstract():
    assert _seen_by(compat.is_abstract_tracer) == EXPECTED


def test_the_fallback_for_a_jax_without_the_private_name_says_the_same(monkeypatch):
    real_import = builtins.__import__

    def without_is_concrete(name, globals=None, locals=None, fromlist=(), level=0):
        if name == "jax._src.core" and "is_concrete" in (fromlist or ()):
            raise ImportError("cannot import name 'is_concrete'")
        return real_import(name, globals, locals, fromlist, level)

    spec = importlib.util.spec_from_file_location("_jax_compat_fallback", compat.__file__)
    fallback = importlib.util.module_from_spec(spec)
    monkeypatch.setattr(builtins, "__import__", without_is_concrete)
    spec.loader.exec_module(fallback)
    monkeypatch.undo()
    assert fallback._is_concrete is fallback._concrete_by_method
    assert _seen_by(fallback.is_abstract_tracer) == EXPECTED


def test_no_other_dp_jax_module_reaches_into_jax_s_private_modules():
    package = pathlib.Path(compat.__file__).parent
    reaching = [str(path.relative_to(package)) for path in sorted(package.rglob("*.py"))
                if path.name != "_jax_compat.py" and any(private in path.read_text()
                                                         for private in ("jax._src", "_cache_size"))]
    assert reaching == []
    assert compat.WRITTEN_FOR.count(".") == 2  # the version it was written for, e.g. "0.10.2"


def test_backend_compiles_are_counted_once_per_program_in_every_open_count_of_this_thread():
    def program(x):
        return jnp.sin(x) * 3.0

    jitted, x = jax.jit(program), np.ones(7, np.float32)  # numpy: making the input compiles nothing
    with compat.count_backend_compiles() as outer:
        with compat.count_backend_compiles() as inner:
            jitted(x).block_until_ready()
        jitted(x).block_until_ready()  # cached: no compile
    assert (outer.count, inner.count) == (1, 1)

    with compat.count_backend_compiles() as here:
        other = threading.Thread(target=lambda: jax.jit(program)(np.ones(9, np.float32)).block_until_ready())
        other.start()
        other.join()
    assert here.count == 0  # another thread's compile is its own
