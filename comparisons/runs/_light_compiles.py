"""XLA's light compile for a comparison's programs on the CPU: there, compiling is what a comparison costs.

A comparison compiles some fifty programs and runs each a few times on tiny batches, so on the CPU
most of its time went to LLVM optimising machine code that then runs for microseconds. While
compare() runs on CPU devices it turns on JAX's own `jax_disable_most_optimizations` (LLVM at -O0,
no expensive LLVM passes) and restores the setting after. The verdicts are the same:
tests/comparisons/runs/test_runs_light_compiles.py compares every built-in pair's report with and without
(measured on the demo: 16.2 s of compiling down to 10.6 s, docs/performance.md).

    $DP_COMPARE_XLA_OPTIMIZE=full   compile with XLA's full optimisation (e.g. to time the programs)

Rounding is another matter: the machine code differs, so a gap can move by an ulp or two,
and dp_jax's bitwise agreement of the strategies on an uneven batch (a promise about the default
compile, tests/dp_jax/test_jax_uneven.py) can be off by an ulp on the short chunk's rows; the
comparison's checks are judged against measured rounding, and their verdicts do not move.

A setting the user made themselves (the flag already on) is left as it is. GPUs always get full
optimisation. While it is on, programs the process compiles in other threads are compiled light too,
and programs compiled during a comparison stay so in JAX's caches.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from typing import Any

ENV = "DP_COMPARE_XLA_OPTIMIZE"
_FLAG = "jax_disable_most_optimizations"
_SETTINGS = ("light", "full")
NOTE = (f"XLA compiled light on the CPU (LLVM -O0, JAX's jax_disable_most_optimizations): rounding may differ from "
        f"a fully optimised program in the last bits, the verdicts do not; ${ENV}=full for full optimisation")


def setting() -> str:
    """$DP_COMPARE_XLA_OPTIMIZE: 'light' (the default, for CPU devices) or 'full'; anything else is refused."""
    from comparisons.errors import ComparisonError

    value = os.environ.get(ENV, "").strip().lower() or "light"
    if value not in _SETTINGS:
        raise ComparisonError(f"${ENV}={os.environ[ENV]!r} is not one of {', '.join(_SETTINGS)}: unset it (light "
                              "compiles on the CPU) or set it to 'full' for XLA's full optimisation")
    return value


@contextlib.contextmanager
def light_compiles(devices: Sequence[Any]) -> Iterator[bool]:
    """Compile light inside the block when every device is a CPU and the setting allows; yields whether it does.

    Costs two config updates; restores the flag whatever the block raises.
    """
    import jax

    wanted = setting() == "light" and all(device.platform == "cpu" for device in devices)
    if not wanted or jax.config.values[_FLAG]:
        yield bool(jax.config.values[_FLAG])
        return
    jax.config.update(_FLAG, True)
    try:
        yield True
    finally:
        jax.config.update(_FLAG, False)
