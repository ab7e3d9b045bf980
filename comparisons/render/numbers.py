"""How every rendering writes a figure, shared by `text`, `html` and `layers`."""
from __future__ import annotations


def format_number(value: float | None) -> str:
    """`value` as 1.23e-04, or an em dash when there is none."""
    return "—" if value is None else f"{value:.2e}"
