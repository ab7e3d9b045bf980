"""Every use of JAX beyond its public API, in one place (as equinox fences its own).

Written for and tested on JAX 0.10.2 (tests/test_jax_compat.py runs on the installed version).
Each private name is imported under try/except with a fallback that is still correct, or that
raises saying which JAX this was written for. Nothing else in dp_jax imports `jax._src`.

- `is_abstract_tracer(x)`: jax._src.core.is_concrete has no public spelling. An eager jax.grad
  tracer wraps a concrete value (it may be placed with device_put); a jit tracer does not.
- `count_backend_compiles()`: jax.monitoring is public, but the name of its backend-compile event
  is not documented (jax/_src/dispatch.py, BACKEND_COMPILE_EVENT).
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import jax
import jax.monitoring

WRITTEN_FOR = "0.10.2"


def _concrete_by_method(x: Any) -> bool:
    """What jax._src.core.is_concrete does in 0.10.2: a tracer's to_concrete_value() is not None."""
    to_concrete = getattr(x, "to_concrete_value", None)
    if to_concrete is None:
        raise RuntimeError(f"dp_jax cannot tell a jit tracer from an eager jax.grad tracer on JAX "
                           f"{jax.__version__} (written for {WRITTEN_FOR}); see dp_jax/_jax_compat.py")
    return to_concrete() is not None


try:
    from jax._src.core import is_concrete as _is_concrete
except ImportError:  # a JAX that moved it
    _is_concrete = _concrete_by_method

BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


def is_abstract_tracer(x: Any) -> bool:
    """True for a tracer with no concrete value (a jit trace); False for arrays and eager grad tracers."""
    return isinstance(x, jax.core.Tracer) and not _is_concrete(x)


class CompileCount:
    """How many backend compiles this thread ran while the count was open (`count`)."""

    def __init__(self) -> None:
        self.count = 0


class _Open(threading.local):
    """The open counts of this thread: a compile is reported in the thread that compiles."""

    def __init__(self) -> None:
        self.counts: list[CompileCount] = []


_open = _Open()
_listening = False


def _on_event(event: str, duration: float, **kwargs: Any) -> None:
    if event == BACKEND_COMPILE_EVENT:
        for open_count in _open.counts:
            open_count.count += 1


@contextlib.contextmanager
def count_backend_compiles() -> Iterator[CompileCount]:
    """Count XLA backend compiles in this thread while open: `with count_backend_compiles() as c: ...; c.count`.

    JAX 0.10.2 reports the event for a program it loads from its persistent compilation cache too, so a
    load counts as a compile here (checked: the same count with the cache cold and warm).
    """
    global _listening
    if not _listening:  # one listener for the process, registered on first use
        jax.monitoring.register_event_duration_secs_listener(_on_event)
        _listening = True
    counted = CompileCount()
    _open.counts.append(counted)
    try:
        yield counted
    finally:
        _open.counts = [c for c in _open.counts if c is not counted]
