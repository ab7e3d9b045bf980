"""Read a rendered rich table back into its cells, to check that a narrow width wrapped but lost nothing."""
from __future__ import annotations

import re

COLUMNS = ["verdict", "check", "compared", "max |Δ|", "rel ‖Δ‖"]


def table_lines(text: str) -> list[str]:
    """The table's lines: from its top border to its bottom border."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("┏"))
    end = next(i for i, line in enumerate(lines) if line.startswith("└"))
    return lines[start:end + 1]


def header(text: str) -> list[str]:
    """The column names, each joined over the header lines it wrapped onto."""
    lines = [line for line in table_lines(text) if line.startswith("┃")]
    return [" ".join(part.strip() for part in column if part.strip())
            for column in zip(*(line.strip("┃").split("┃") for line in lines))]


def rows(text: str) -> list[list[str]]:
    """Each table row as its cells with all whitespace removed; a row starts where the verdict cell is filled
    (every row has a verdict or a leaf word), wrapped lines continue it."""
    body = [line.strip("│").split("│") for line in table_lines(text) if line.startswith("│")]
    joined: list[list[str]] = []
    for cells in body:
        if cells[0].strip():
            joined.append(["" for _ in cells])
        joined[-1] = [so_far + re.sub(r"\s", "", cell) for so_far, cell in zip(joined[-1], cells)]
    return joined


def squeezed(text: str) -> str:
    return re.sub(r"\s", "", text)
