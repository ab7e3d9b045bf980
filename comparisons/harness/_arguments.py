"""compare()'s arguments (through `Settings`) and a user pair's functions, checked before any work runs.

Every message names the argument (or the pair and its function), the value, and the fix.
Nothing here imports torch or JAX.
"""
from __future__ import annotations

import numbers
import os
from collections.abc import Callable, Sequence
from typing import Any

from comparisons.errors import ComparisonError


def _type_of(value: Any) -> str:
    """' (a str)' for a value whose repr may hide that it is not an int (e.g. numpy scalars), else ''."""
    return "" if type(value) is int else f" (a {type(value).__name__})"


SEED_LIMIT = 2**32 - 1  # numpy, torch.manual_seed and a JAX key all take it, and the seeds derived from it


def seed(value: Any) -> int:
    """A seed numpy's default_rng, torch.manual_seed and jax.random.key all take: an int from 0 to 2**32 - 1."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 <= value <= SEED_LIMIT:
        raise ComparisonError(f"compare: seed={value!r}{_type_of(value)}; pass an integer from 0 to {SEED_LIMIT} "
                              "(2**32 - 1), e.g. seed=0")
    return int(value)


def progress(value: Any) -> Callable[[str, int], None] | None:
    """None or a callable taking (label, total_steps)."""
    if value is not None and not callable(value):
        raise ComparisonError(f"compare: progress={value!r} is not callable; pass a function "
                              "progress(label: str, total_steps: int), or None")
    return value


def flag(name: str, value: Any) -> bool:
    """`value` when it is a bool (not 1, "yes" or None)."""
    if not isinstance(value, bool):
        raise ComparisonError(f"compare: {name}={value!r}{_type_of(value)} is not a bool; pass True or False")
    return value


def strategy_names(value: Any) -> Any:
    """None or a sequence of names; one bare string is refused (it would iterate letter by letter)."""
    if isinstance(value, str):
        raise ComparisonError(f"compare: strategies={value!r} is one string; pass a list, "
                              f"strategies=[{value!r}]")
    if value is not None and not hasattr(value, "__iter__"):
        raise ComparisonError(f"compare: strategies={value!r} is not a list of names; pass e.g. "
                              "strategies=['explicit'], or None for every strategy that applies")
    return value


def tolerance(name: str, value: Any) -> float | None:
    """None (the default for the dtype, or derived) or a finite number >= 0 (not a bool or a string)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value >= 0 or value == float("inf"):
        raise ComparisonError(f"compare: {name}={value!r}{_type_of(value)}; pass a finite number >= 0, e.g. "
                              f"{name}=1e-5, or None for the default")
    return float(value)


PROBE_BATCHES = (2, 4)  # make_inputs runs at these to measure a row; larger batches are extrapolated


def fits_in_memory(pair: Any, config: Any) -> None:
    """Refuse a batch whose inputs alone exceed this machine's memory, before numpy's allocator dies on it.

    Costs two calls of pair.make_inputs at batches 2 and 4 (host arrays), when config.batch_size is larger.
    The run holds more than the inputs (copies, activations): this catches only what cannot fit at all.
    """
    memory = _physical_memory()
    if memory is None or config.batch_size <= PROBE_BATCHES[-1]:
        return
    import numpy as np

    try:
        small, large = (_nbytes(pair.make_inputs(batch, config.seed, np.dtype(config.dtype)))
                        for batch in PROBE_BATCHES)
    except Exception:  # noqa: BLE001 (a broken make_inputs is reported by the real call, with its own checks)
        return
    per_row = (large - small) / (PROBE_BATCHES[1] - PROBE_BATCHES[0])
    fixed = small - per_row * PROBE_BATCHES[0]
    needed = fixed + per_row * config.batch_size
    if per_row > 0 and needed > memory:
        largest = int((memory - fixed) // per_row)
        raise ComparisonError(f"compare: batch_size={config.batch_size}: the inputs of pair {pair.name!r} alone need "
                              f"{_size(needed)} ({_size(per_row)} a row, measured by make_inputs at batches "
                              f"{PROBE_BATCHES[0]} and {PROBE_BATCHES[1]}), more than this machine's "
                              f"{_size(memory)} of memory; pass batch_size <= {largest} (the run itself needs "
                              "several times the inputs)")


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):  # not a POSIX system: no check
        return None


def _nbytes(value: Any) -> int:
    """Bytes of the arrays in make_inputs' (inputs, targets): nested tuples, lists and dicts of arrays.

    Walked by hand: this module imports neither torch nor JAX (their tree utilities).
    """
    if isinstance(value, dict):
        return sum(_nbytes(child) for child in value.values())
    if isinstance(value, (tuple, list)):
        return sum(_nbytes(child) for child in value)
    return int(getattr(value, "nbytes", 0))


def _size(n: float) -> str:
    """Bytes for a person: '89 B', '8.7 TiB'."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def model_pair(pair: Any) -> Any:
    """A ModelPair, or the registered pair named `pair`."""
    from comparisons import models

    if isinstance(pair, str):
        try:
            return models.get(pair)
        except KeyError as error:
            raise ComparisonError(f"compare: {error.args[0]}") from None
    if not isinstance(pair, models.ModelPair):
        raise ComparisonError(f"compare: pair={pair!r} is neither a ModelPair nor a registered name; "
                              f"known names: {models.names()}")
    return pair


def choice(name: str, value: Any, allowed: Sequence[str], caller: str = "compare") -> str:
    """`value` when it is one of `allowed`."""
    if value not in allowed:
        raise ComparisonError(f"{caller}: {name}={value!r} is not supported; use one of {', '.join(allowed)}")
    return value


def strategies(chosen: Sequence[str] | None, known: Sequence[str]) -> list[str]:
    """The strategies to run, each once, in the order given; every known one for None."""
    if chosen is None:
        return list(known)
    chosen = list(dict.fromkeys(chosen))
    if not chosen:
        raise ComparisonError(f"compare: strategies=[] is empty; pass at least one of {', '.join(known)} "
                              "(or None for all)")
    for strategy in chosen:
        choice("strategy", strategy, known)
    return chosen
