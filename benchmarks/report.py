"""Render results as Markdown tables (printed, and written to docs/performance.md) and JSON."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

KINDS = ("ratio", "shares", "value", "error")


def _kind(row: dict[str, Any]) -> str:
    return next(kind for kind in KINDS if kind in row)


def _label_columns(rows: list[dict[str, Any]]) -> list[str]:
    columns: list[str] = []
    for row in rows:
        columns += [key for key in row["labels"] if key not in columns]
    return columns


def _milliseconds(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


def _ratio_cells(row: dict[str, Any]) -> list[str]:
    r, target = row["ratio"], row.get("target")
    verdict = "" if target is None else ("yes" if r["median"] <= target else "**no**")
    iqr = "n/a" if r["q1"] is None else f"{r['q1']:.2f}-{r['q3']:.2f}"
    return [f"{r['median']:.2f}x", iqr, f"{r['min']:.2f}-{r['max']:.2f}",
            "" if target is None else f"<= {target}", verdict, _milliseconds(r["a_s"]), _milliseconds(r["b_s"])]


RATIO_HEADERS = ["ratio (median)", "IQR", "min-max", "target", "met", "t(A)", "t(B)"]


def _error_cells(row: dict[str, Any]) -> list[str]:
    return [row["error"].replace("|", "/").replace("\n", " ")]


def _shares_cells(row: dict[str, Any]) -> list[str]:
    return [f"{s['median']:.0%} ({s['min']:.0%}-{s['max']:.0%})" for s in row["shares"].values()]


def _value_cells(row: dict[str, Any]) -> list[str]:
    target = row.get("target")
    met = "" if target is None else ("yes" if row["value"] <= target else "**no**")
    return [f"{row['value']:.3g} {row.get('unit', '')}".strip(), "" if target is None else f"<= {target}", met]


def _derived_columns(rows: list[dict[str, Any]]) -> list[str]:
    columns: list[str] = []
    for row in rows:
        columns += [key for key in row.get("derived", {}) if key not in columns]
    return columns


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """One Markdown table for rows of one kind: label columns, that kind's figures, derived figures."""
    kind = _kind(rows[0])
    labels = _label_columns(rows)
    derived = _derived_columns(rows)
    headers, cells = {
        "ratio": (RATIO_HEADERS, _ratio_cells),
        "shares": (list(rows[0].get("shares", ())), _shares_cells),
        "value": (["value", "target", "met"], _value_cells),
        "error": (["error"], _error_cells),
    }[kind]
    lines = ["| " + " | ".join(labels + headers + derived) + " |",
             "|" + "---|" * (len(labels) + len(headers) + len(derived))]
    for row in rows:
        extra = [f"{row['derived'][key]:.2f}x" if key in row.get("derived", {}) else "" for key in derived]
        lines.append("| " + " | ".join([str(row["labels"].get(key, "")) for key in labels] + cells(row) + extra) + " |")
    return "\n".join(lines)


def _verdict(value: float, target: float) -> str:
    return f"{value:.2f}x" + ("" if value <= target else " ✗")


def pivot_markdown(rows: list[dict[str, Any]], column: str) -> str:
    """Ratio rows with a target as one line per other-label combination, one column per `column` value.

    A ✗ marks a median above its target; "÷ reference" figures follow in brackets when present.
    """
    rows = [row for row in rows if "ratio" in row and row.get("target") is not None]
    keys = [key for key in _label_columns(rows) if key != column]
    values = sorted({row["labels"][column] for row in rows})
    lines: dict[tuple, dict[Any, str]] = {}
    for row in rows:
        cell = _verdict(row["ratio"]["median"], row["target"])
        if "÷ reference" in row.get("derived", {}):
            cell += f" ({row['derived']['÷ reference']:.2f}x)"
        lines.setdefault(tuple(row["labels"][key] for key in keys) + (row["target"],), {})[row["labels"][column]] = cell
    header = keys + ["target"] + [f"{column}={value}" for value in values]
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for line, cells in lines.items():
        out.append("| " + " | ".join([str(v) for v in line[:-1]] + [f"<= {line[-1]}"]
                                      + [cells.get(value, "") for value in values]) + " |")
    return "\n".join(out)


def targets_markdown(sections: list[dict[str, Any]]) -> str:
    """Every figure that has a target, per section; the device sweep as a pivot table."""
    parts = []
    for section in sections:
        rows = [row for row in section["rows"] if row.get("target") is not None]
        if not rows:
            continue
        parts.append(f"**{section['title']}**\n")
        is_sweep = (all("devices" in row["labels"] for row in rows)
                    and len({row["labels"]["devices"] for row in rows}) > 1)
        parts.append(pivot_markdown(rows, "devices") if is_sweep else markdown_table(rows))
        parts.append("")
    return "\n".join(parts)


def section_markdown(section: dict[str, Any], heading: str = "##") -> str:
    parts = [f"{heading} {section['title']}", "", section["what"], ""]
    if section["unavailable"]:
        parts += [f"not available: {section['unavailable']}", ""]
    for kind in KINDS:
        rows = [row for row in section["rows"] if _kind(row) == kind]
        if rows:
            parts += [markdown_table(rows), ""]
    parts += [f"- {note}" for note in section["notes"]]
    return "\n".join(parts).rstrip() + "\n"


def machine_markdown(machine: dict[str, Any]) -> str:
    return "\n".join(f"- **{key}**: {value}" for key, value in machine.items()) + "\n"


def write_json(results: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1) + "\n")
