"""Generators for the tables in docs/*.md; each returns Markdown computed by running our code."""
from __future__ import annotations

from collections.abc import Callable

GENERATORS: dict[str, Callable[[], str]] = {}


def generator(name: str) -> Callable[[Callable[[], str]], Callable[[], str]]:
    """Register `fn` as the producer of the section called `name`."""
    def register(fn: Callable[[], str]) -> Callable[[], str]:
        GENERATORS[name] = fn
        return fn
    return register


# Each page family registers its generators on import.
import sections_hf  # noqa: E402,F401
import sections_pipeline  # noqa: E402,F401
import sections_training  # noqa: E402,F401
