"""A rich progress bar on stderr for compare(): one tick per training step of each pipeline."""
from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def progress_bar() -> Iterator[Callable[[str, int], None]]:
    """Yields `advance(label, total)`; draws only when stderr is a terminal (transient: gone when done)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description:<16}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True,
                  disable=not sys.stderr.isatty()) as progress:
        task = progress.add_task("starting", total=None)

        def advance(label: str, total: int) -> None:
            progress.update(task, advance=1, total=total, description=label)

        yield advance
