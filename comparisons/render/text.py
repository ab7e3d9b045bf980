"""Plain-text renderings of a ComparisonReport: a rich table for the terminal and Markdown.

Also the words every rendering shares (headline, verdict, numbers), so the HTML page says the same.
"""
from __future__ import annotations

import io
from typing import Any

from comparisons.verdicts import Check, ComparisonReport


def format_number(value: float | None) -> str:
    return "—" if value is None else f"{value:.2e}"


def verdict(check: Check) -> str:
    return "PASS" if check.passed else "FAIL"


def headline(report: ComparisonReport) -> str:
    return (f"{report.model}: batch {report.batch_size} on {report.devices} device(s) "
            f"(chunks {', '.join(map(str, report.chunk_sizes))}), {report.dtype}, "
            f"{report.steps} {report.optimizer} step(s), strategies "
            f"{', '.join(report.strategies)}, torch on {torch_device_words(report)}")


def torch_device_words(report: ComparisonReport) -> str:
    """Which torch devices held the replicas, e.g. "virtual devices vdev:0..3"."""
    last = report.devices - 1
    return {"cpu": f"the CPU (repeated {report.devices}x)", "virtual": f"virtual devices vdev:0..{last}",
            "cuda": f"cuda:0..{last}"}.get(report.torch_devices, report.torch_devices)


def to_table(report: ComparisonReport, width: int = 120) -> str:
    """A rich table of the checks, as plain text (colours only when printed to a terminal)."""
    from rich.console import Console

    buffer = io.StringIO()
    console = Console(file=buffer, width=width, force_terminal=False, color_system=None)
    print_table(report, console)
    return buffer.getvalue()


def print_table(report: ComparisonReport, console: Any) -> None:
    """Prints the table to a rich `console` (with colour when it is a terminal)."""
    # Prose lines are never wrapped (soft_wrap): a title would wrap at the table's width, a line at the
    # console's, and a wrapped path or number no longer greps.
    console.print(f"{headline(report)}; tolerance {report.tolerance['max_abs']:.0e}", markup=False, soft_wrap=True)
    console.print(_rich_table(report))
    _print_footer(console, report)


def _rich_table(report: ComparisonReport):
    from rich.table import Table

    table = Table()
    table.add_column("check", no_wrap=True)
    table.add_column("compared", min_width=16)
    for column in ("max |Δ|", "rel ‖Δ‖"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    for check in report.checks:
        style = "green" if check.passed else "bold red"
        table.add_row(check.subject, check.compared, format_number(check.max_abs),
                      format_number(check.rel_norm), f"[{style}]{verdict(check)}[/]")
    return table


def _print_footer(console: Any, report: ComparisonReport) -> None:
    for note in report.notes:
        console.print(f"note: {note}", markup=False, soft_wrap=True)
    for check in report.failures:
        console.print(f"FAIL {check.subject} ({check.compared}): {check.detail}", markup=False, soft_wrap=True)
    total, failed = len(report.checks), len(report.failures)
    summary = f"{total - failed}/{total} checks passed"
    console.print(f"[green]{summary}[/]" if report.ok else f"[bold red]{summary}[/]")


def to_markdown(report: ComparisonReport) -> str:
    """GitHub-flavoured Markdown: headline, tolerance, the check table, notes and details."""
    lines = [f"# dp-compare: {report.model}", "", headline(report) + ".", "",
             f"Tolerance ({report.dtype}): max |Δ| ≤ {report.tolerance['max_abs']:.0e} or "
             f"rel ‖Δ‖ ≤ {report.tolerance['rel_norm']:.0e}.", "",
             "| check | compared | max \\|Δ\\| | rel ‖Δ‖ | verdict | detail |",
             "|---|---|---:|---:|---|---|"]
    for check in report.checks:
        lines.append(f"| {check.subject} | {check.compared} | {format_number(check.max_abs)} | "
                     f"{format_number(check.rel_norm)} | **{verdict(check)}** | "
                     f"{check.detail.replace('|', '/')} |")
    lines += ["", *(f"- note: {note}" for note in report.notes), "",
              f"**{'OK' if report.ok else 'FAILED'}**: {len(report.checks) - len(report.failures)}"
              f"/{len(report.checks)} checks passed.", ""]
    return "\n".join(lines)
