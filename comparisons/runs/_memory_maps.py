"""Keep a process that runs many comparisons under Linux's limit on memory maps.

Each compiled XLA:CPU program maps its code in many small regions (a comparison of the MLP pair holds
about 2,000 maps, of the BatchNorm CNN about 5,000), and the caches that let a second comparison of a
pair compile nothing keep those programs alive. Past `vm.max_map_count` (65,530 by default) the next
compile cannot map its code and the process dies with SIGSEGV inside jaxlib: measured after some
twenty different pairs in one process (the slow test tier; a sweep of every Hugging Face family).
So each comparison first counts its maps and, past half the limit, forgets every cached program.
"""
from __future__ import annotations

import gc
import sys
from pathlib import Path

_MAPS = Path("/proc/self/maps")
_LIMIT = Path("/proc/sys/vm/max_map_count")


def map_count() -> int | None:
    """How many memory maps this process holds, or None where the system does not say (not Linux)."""
    try:
        with _MAPS.open("rb") as maps:
            return sum(1 for _ in maps)
    except OSError:
        return None


def map_limit() -> int | None:
    """The system's limit on a process's memory maps (`vm.max_map_count`), or None where it has none."""
    try:
        return int(_LIMIT.read_text())
    except (OSError, ValueError):
        return None


def clear_cached_programs() -> None:
    """Empty the caches of compiled programs that comparisons' runs and dp_jax keep (`comparisons.clear_caches`).
    A no-op for a module no run has imported."""
    for name in ("comparisons.runs.jax_run", "dp_jax"):
        if name in sys.modules:
            sys.modules[name].clear_caches()


def free_programs_near_map_limit(limit: int | None = None, fraction: float = 0.5) -> str | None:
    """Forget every cached compiled program (comparisons', dp_jax's and JAX's) when this process holds
    more than `fraction` of `limit` memory maps (default: the system's); a line saying so, or None.

    The next comparisons compile again (JAX's persistent cache, where on, loads what it can). Costs one
    read of /proc/self/maps (a few milliseconds); where maps cannot be counted it does nothing.
    """
    count, limit = map_count(), limit if limit is not None else map_limit()
    if count is None or limit is None or count < fraction * limit:
        return None
    clear_cached_programs()
    if "jax" in sys.modules:
        sys.modules["jax"].clear_caches()
    gc.collect()
    return (f"this process held {count} memory maps of the system's {limit} (vm.max_map_count), mostly compiled "
            f"programs of earlier comparisons; they were freed first ({map_count()} left), so this one compiled "
            "afresh")
