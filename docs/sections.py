"""Generators for the tables in docs/*.md; each returns Markdown computed by running our code."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

DOCS = Path(__file__).resolve().parent
GENERATORS: dict[str, Callable[[], str]] = {}
ASSETS: dict[str, Callable[[], str]] = {}  # file name in docs/ -> its text (a chart a page links)


def generator(name: str) -> Callable[[Callable[[], str]], Callable[[], str]]:
    """Register `fn` as the producer of the section called `name`."""
    def register(fn: Callable[[], str]) -> Callable[[], str]:
        GENERATORS[name] = fn
        return fn
    return register


def asset(name: str) -> Callable[[Callable[[], str]], Callable[[], str]]:
    """Register `fn` as the producer of the file docs/`name` (written by `generate.py`, never by --check: a
    picture's bytes follow the plotting library's version, so no test compares them)."""
    def register(fn: Callable[[], str]) -> Callable[[], str]:
        ASSETS[name] = fn
        return fn
    return register


# Each page family registers its generators on import.
import sections_hf  # noqa: E402,F401
import sections_pipeline  # noqa: E402,F401
import sections_report  # noqa: E402,F401
import sections_training  # noqa: E402,F401
