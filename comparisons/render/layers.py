"""The layer view in words: the first divergence, the per-layer table (text and Markdown) and its HTML section.

Rows come from `report.layer_view` (docs/report_schema.md#layer-view); nothing here computes a verdict.
"""
from __future__ import annotations

from html import escape
from typing import Any

from comparisons.render.numbers import format_number
from comparisons.verdicts import ComparisonReport

TITLE = "layers, torch beside Flax, in torch's order"
COLUMNS = ("layer (torch)", "Flax", "kind", "call", "input max |Δ|", "input", "output max |Δ|", "output", "rel")


def divergence_line(report: ComparisonReport) -> str | None:
    """One line naming where torch and Flax first part, or saying they never do; None without a layer view."""
    if report.layer_view is None:
        return None
    where = report.first_divergence
    if where is None:
        return (f"first divergence: none; every one of {len(report.layer_view)} layer calls agrees or differs "
                "by rounding")
    return f"first divergence ({where['where']}, {where['cause'] or 'cause unmeasured'}): {where['message']}"


def replica_lines(report: ComparisonReport) -> list[str]:
    """One line per replica named as computing unlike one device on its chunk."""
    return [f"replica: {record['message']}" for record in report.replica_divergences or ()]


def _side(side: dict[str, Any]) -> str:
    word = side["verdict"]
    return f"{word} ({side['cause']})" if side["cause"] and word == "differs" else word


def cells(row: dict[str, Any]) -> list[str]:
    """The table cells of one layer-view row, in COLUMNS order."""
    return [row["torch"], row["flax"], row["kind"], str(row["call"]), format_number(row["input"]["max_abs"]),
            _side(row["input"]), format_number(row["output"]["max_abs"]), _side(row["output"]),
            format_number(row["output"]["rel"])]


def print_layer_table(report: ComparisonReport, console: Any, fit: bool = False) -> None:
    """The per-layer table and the first divergence on a rich `console` (nothing without a layer view).

    The names are what a user reads the table for, so they are never wrapped, cut or dropped: `fit` (no
    terminal: a pipe, a CI log, `render("table")`) prints the table at its natural width, one line per row;
    a terminal too narrow for it drops the `rel` column first, and one too narrow for that gets each row as
    a short block of lines (names, then each side's verdict and figure), which fits 60 columns.
    """
    if report.layer_view is None:
        return
    for columns in (COLUMNS, COLUMNS[:-1]):
        table = _layer_table(report, columns)
        natural = console.measure(table, options=console.options.update_width(10**4)).maximum
        if fit or natural <= console.width:
            if natural > console.width:
                console.width = natural
            console.print(table)
            break
    else:
        _print_layer_blocks(report, console)
    for line in (divergence_line(report), *replica_lines(report)):
        console.print(line, markup=False, soft_wrap=True)


def _parted(row: dict[str, Any]) -> bool:
    return not all(row[s]["verdict"] in ("agree", "rounding") for s in ("input", "output"))


def _layer_table(report: ComparisonReport, columns: tuple[str, ...]):
    from rich.table import Table

    table = Table(title=TITLE)
    for column in columns:
        table.add_column(column, no_wrap=True)
    for row in report.layer_view:
        table.add_row(*cells(row)[:len(columns)], style="bold red" if _parted(row) else None)
    return table


def block_lines(row: dict[str, Any]) -> list[str]:
    """One layer-view row as short lines: the names, then one line per side (verdict, max |Δ|, rel)."""
    torch_name, flax_name, kind, call, in_abs, in_word, out_abs, out_word, rel = cells(row)
    return [f"{torch_name} ({kind}, call {call})", f"  Flax   {flax_name}",
            f"  input  {in_word}, max |Δ| {in_abs}", f"  output {out_word}, max |Δ| {out_abs}, rel {rel}"]


def _print_layer_blocks(report: ComparisonReport, console: Any) -> None:
    console.print(TITLE, markup=False, soft_wrap=True)
    for row in report.layer_view:
        for line in block_lines(row):
            console.print(line, markup=False, soft_wrap=True, style="bold red" if _parted(row) else None)


def layer_markdown(report: ComparisonReport) -> list[str]:
    """The layer view as Markdown lines (none without a layer view)."""
    if report.layer_view is None:
        return []
    lines = ["", "## Layers, torch beside Flax", "", "| " + " | ".join(COLUMNS) + " |",
             "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cell.replace("|", "/") for cell in cells(row)) + " |" for row in report.layer_view]
    return lines + ["", f"**{divergence_line(report)}**", *(f"- {line}" for line in replica_lines(report))]


def layer_section_html(report: ComparisonReport) -> str:
    """A self-contained HTML section (heading, first divergence, table): "" without a layer view. Uses the
    page's classes (num, fail, scroll) and nothing else, so it can sit anywhere on the page."""
    if report.layer_view is None:
        return ""
    head = "".join(f"<th>{escape(c)}</th>" for c in COLUMNS)
    body = []
    for row in report.layer_view:
        parted = _parted(row)
        tds = "".join(f"<td class=num>{escape(c)}</td>" if i in (3, 4, 6, 8) else f"<td>{escape(c)}</td>"
                      for i, c in enumerate(cells(row)))
        body.append(f"<tr class=fail>{tds}</tr>" if parted else f"<tr>{tds}</tr>")
    lines = [divergence_line(report) or "", *replica_lines(report)]
    where = "".join(f"<p class={'bad' if report.first_divergence or i else 'ok'}>{escape(line)}</p>"
                    for i, line in enumerate(lines))
    return (f"<section id=layers><h2>Layers: torch beside Flax</h2>{where}"
            f"<div class=scroll><table><tr>{head}</tr>{''.join(body)}</table></div></section>")
