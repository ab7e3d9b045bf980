"""The bench section (report.bench, docs/report_schema.md#bench) as table lines, Markdown and HTML.

Every rendering puts it after the verdict: a step time means something only once the sides computed the
same thing. A refused bench (a check failed) renders as its one line, with no figure.
"""
from __future__ import annotations

from html import escape
from typing import Any

from comparisons.verdicts import ComparisonReport

HEADER = ("side", "median ms", "min ms", "max ms", "first call ms", "× torch DP", "× floor")


def bench_rows(bench: dict[str, Any]) -> list[tuple[str, ...]]:
    """One row of cells per side: its name, median with min and max, first call, and its two ratios."""
    return [(row["side"], *(f"{1000 * row[key]:.3f}" for key in ("median_s", "min_s", "max_s", "first_s")),
             _ratio(row["vs_torch_dp"]), _ratio(row["vs_floor"])) for row in bench["sides"]]


def _ratio(value: float | None) -> str:
    """A ratio's cell; '-' where the run timed nothing to divide by (no floor across processes)."""
    return "-" if value is None else f"{value:.3g}"


def bench_words(bench: dict[str, Any]) -> list[str]:
    """The lines around the table: what was timed and against what, the machine, sides not run, the notes."""
    if not bench["ran"]:
        return [f"bench: {bench['reason']}"]
    machine = bench["machine"]
    load = ", ".join(f"{value:.2f}" for value in machine["load_average"])
    return [_what_was_timed(bench),
            f"bench machine: torch {machine['torch_devices']}; JAX {machine['jax_devices']}; {machine['cores']} "
            f"cores, load average {load}",
            *(f"bench: {row['side']} not timed: {row['why']}" for row in bench["not_run"]),
            *(f"bench: {note}" for note in bench["notes"])]


def _what_was_timed(bench: dict[str, Any]) -> str:
    if "processes" in bench["machine"]:  # a multi-process run (comparisons/distributed/bench.py)
        against = f"; × torch DP: against {bench['torch_dp_side']}" if bench["torch_dp_side"] else ""
        return (f"bench: one training step per side, {bench['rounds']} timed steps each, every rank together: the "
                f"median, min and max of the slowest rank{against}")
    return (f"bench: one training step per side, {bench['rounds']} interleaved timed steps each: the median, min "
            f"and max; × torch DP: against {bench['torch_dp_side']}; × floor: against the hand-written "
            "jax.jit + NamedSharding step")


def print_bench(report: ComparisonReport, console: Any) -> None:
    """The bench as a rich table and its lines, on `console`; nothing when the report has no bench."""
    bench = getattr(report, "bench", None)
    if not bench:
        return
    if bench["ran"]:
        from rich.table import Table

        table = Table(title="Step time per side")
        for i, name in enumerate(HEADER):
            table.add_column(name, justify="left" if i == 0 else "right", no_wrap=i > 0, overflow="fold")
        for row in bench_rows(bench):
            table.add_row(*row)
        if not console.is_terminal:  # a pipe or a file: as wide as the table, so every row stays one line
            wide = console.options.update_width(10**4)
            console.width = max(console.width, console.measure(table, options=wide).maximum)
        console.print(table)
    for line in bench_words(bench):
        console.print(line, markup=False, soft_wrap=True)


def bench_markdown(report: ComparisonReport) -> list[str]:
    """The bench as Markdown lines (a table and its lines); none when the report has no bench."""
    bench = getattr(report, "bench", None)
    if not bench:
        return []
    lines = ["", "## Step time per side", ""]
    if bench["ran"]:
        lines += ["| " + " | ".join(HEADER) + " |", "|---" + "|---:" * (len(HEADER) - 1) + "|",
                  *("| " + " | ".join(row) + " |" for row in bench_rows(bench)), ""]
    return lines + [f"- {line}" for line in bench_words(bench)]


def bench_html(report: ComparisonReport) -> str:
    """The bench's HTML section: the bar chart with the spread and its lines; '' when the report has none."""
    bench = getattr(report, "bench", None)
    if not bench:
        return ""
    words = "".join(f"<p class=note>{escape(line)}</p>" for line in bench_words(bench))
    if not bench["ran"]:
        return f"<section class=bench><h2>Step time per side</h2>{words}</section>"
    from comparisons.render.chart import bench_svg

    return (f"<section class=bench><h2>Step time per side</h2><figure class=chart>{bench_svg(bench['sides'])}"
            "<figcaption>Median seconds per training step (forward, backward, update) of every side, the bar; the "
            "whisker spans the fastest and the slowest timed step.</figcaption></figure>"
            f"{words}</section>")
