"""Plain-text renderings of a ComparisonReport: a rich table for the terminal and Markdown.

Also the words every rendering shares (headline, verdict, numbers), so the HTML page says the same.
"""
from __future__ import annotations

import io
from typing import Any

from comparisons.judge import drift_line
from comparisons.render.bench import bench_markdown, print_bench
from comparisons.render.layers import layer_markdown, print_layer_table
from comparisons.render.numbers import format_number
from comparisons.verdicts import Check, ComparisonReport


def verdict(check: Check) -> str:
    return "PASS" if check.passed else "FAIL"


def tolerance_words(report: ComparisonReport) -> str:
    """Which tolerances judged the numbers and where each came from (default, the user's, derived)."""
    tol = report.tolerance
    words = f"rtol {tol['rtol']:.0e} ({tol['rtol_source']}); atol " + (
        f"{tol['atol']:.0e} ({tol['atol_source']})" if tol["atol"] is not None else tol["atol_source"])
    if tol.get("float64_rtol") is not None:
        words += (f"; float64 check: rtol {tol['float64_rtol']:.0e}, a torch-vs-JAX leaf that differs there is a "
                  "port difference")
    return words


def shown_leaves(check: Check) -> list:
    """Every failing leaf of `check`, or, when none fails, the passing leaf closest to its bound."""
    failing = [leaf for leaf in check.leaves if not leaf.passed]
    if failing or not check.leaves:
        return failing
    return [max(check.leaves, key=lambda x: (x.max_abs or 0.0) / x.atol if x.atol else (x.max_abs or 0.0))]


KIND_WORDS = {"values": "beyond its bound", "zero": "zero on one side only", "non_finite": "NaN/Inf",
              "shape": "shapes differ", "dtype": "dtypes differ", "missing": "missing on one side",
              "extra": "on one side only"}


def worst_leaf(check: Check) -> str:
    """The worst failing leaf (a broken structure first, then the largest |Δ| against its bound), else the passing
    leaf closest to its bound, as 'path |Δ| x ≤ atol y' or 'path |Δ| x (port)'."""
    if not check.leaves:
        return ""
    leaf = max(shown_leaves(check), key=_badness)
    figure = "—" if leaf.max_abs is None else f"{leaf.max_abs:.1e}"
    if leaf.passed:
        return f"{leaf.path} {figure}" + ("" if leaf.atol is None else f" ≤ atol {leaf.atol:.0e}")
    return f"{leaf.path} {figure} ({leaf.cause or KIND_WORDS.get(leaf.kind, leaf.kind)})"


def _badness(leaf) -> float:
    """How far a leaf is from passing: infinite when no figure could be taken (shape, NaN, missing)."""
    if leaf.max_abs is None:
        return float("inf")
    return leaf.max_abs / leaf.atol if leaf.atol else leaf.max_abs


def leaf_lines(check: Check) -> list[str]:
    """One line per failing leaf of `check`, with its cause: what the footers list under a failure."""
    return [f"  - {leaf.message or leaf.path}" + (f" [{leaf.cause}]" if leaf.cause else "")
            for leaf in check.leaves if not leaf.passed]


def drift_words(report: ComparisonReport) -> str:
    """The one line on the drift per step: rounding's slow steady growth, or a jump (judge/_drift.py's rule)."""
    return drift_line(report.drift, report.tolerance["rtol"], report.dtype)


def headline(report: ComparisonReport) -> str:
    return (f"{report.model}: batch {report.batch_size} on {report.devices} device(s) "
            f"(chunks {', '.join(map(str, report.chunk_sizes))}), {report.dtype}, "
            f"{report.steps} {report.optimizer} step(s), strategies "
            f"{', '.join(report.strategies)}, torch on {torch_device_words(report)}"
            + (f", JAX in Flax {FLAX_WORDS.get(report.flax, report.flax)}" if report.flax else ""))


FLAX_WORDS = {"nnx": "NNX", "linen": "linen"}  # the report's `flax` as the headline says it


def torch_device_words(report: ComparisonReport) -> str:
    """Which torch devices held the replicas, e.g. "virtual devices vdev:0..3"."""
    last = report.devices - 1
    return {"cpu": f"the CPU (repeated {report.devices}x)", "virtual": f"virtual devices vdev:0..{last}",
            "cuda": f"cuda:0..{last}"}.get(report.torch_devices, report.torch_devices)


def to_table(report: ComparisonReport, width: int | None = None) -> str:
    """A rich table of the checks, as plain text: `width` columns, or None for as wide as the table
    needs (nothing wraps), as in a file or a pipe. Costs one pass over the checks."""
    from rich.console import Console

    buffer = io.StringIO()
    console = Console(file=buffer, width=width or 80, force_terminal=False, color_system=None)
    print_table(report, console, fit=width is None)
    return buffer.getvalue()


def print_table(report: ComparisonReport, console: Any, fit: bool | None = None) -> None:
    """Prints the table to a rich `console`, with colour when it is a terminal.

    The verdict is the first column and no column is ever dropped or cut: in a narrow console the
    check and compared cells wrap. `fit` (default: when the console is no terminal, e.g. under CI or
    `| tee`) widens the console to the table's natural width, so every row stays one greppable line.
    """
    table = _rich_table(report)
    fit = console.is_terminal is False if fit is None else fit
    if fit:
        console.width = max(console.width, console.measure(table, options=console.options.update_width(10**4)).maximum)
    # Prose lines are never wrapped (soft_wrap): a title would wrap at the table's width, a line at the
    # console's, and a wrapped path or number no longer greps.
    console.print(f"{headline(report)}; {tolerance_words(report)}", markup=False, soft_wrap=True)
    console.print(table)
    print_layer_table(report, console, fit)
    _print_footer(console, report)
    print_bench(report, console)


def _rich_table(report: ComparisonReport):
    from rich.table import Table

    table = Table()
    table.add_column("verdict", no_wrap=True)  # first, so the narrowest terminal still shows it
    table.add_column("check", overflow="fold")
    table.add_column("compared", overflow="fold")
    for column in ("max |Δ|", "rel ‖Δ‖"):
        table.add_column(column, justify="right", no_wrap=True)
    for check in report.checks:
        style = "green" if check.passed else "bold red"
        table.add_row(f"[{style}]{verdict(check)}[/]", check.subject, check.compared, format_number(check.max_abs),
                      format_number(check.rel_norm))
        for leaf in shown_leaves(check):  # every failing leaf, else the worst passing one beside its bound
            bound = f" ≤ atol {leaf.atol:.0e}" if leaf.passed and leaf.atol is not None else ""
            word = "ok" if leaf.passed else f"[bold red]{leaf.cause or leaf.kind}[/]"
            table.add_row(word, "", f"└ {leaf.path}{bound}", format_number(leaf.max_abs), format_number(leaf.rel))
    return table


def _print_footer(console: Any, report: ComparisonReport) -> None:
    for note in report.notes:
        console.print(f"note: {note}", markup=False, soft_wrap=True)
    for check in report.failures:
        cause = f" [{check.cause}]" if check.cause else ""
        failing = [leaf for leaf in check.leaves if not leaf.passed]
        summary = f"{len(failing)} of {len(check.leaves)} leaves fail" if failing else check.detail
        console.print(f"FAIL {check.subject} ({check.compared}){cause}: {summary}", markup=False, soft_wrap=True)
        for line in leaf_lines(check):
            console.print(line, markup=False, soft_wrap=True)
    if report.drift:
        console.print(drift_words(report), markup=False, soft_wrap=True)
    total, failed = len(report.checks), len(report.failures)
    summary = f"{total - failed}/{total} checks passed"
    console.print(f"[green]{summary}[/]" if report.ok else f"[bold red]{summary}[/]")


def to_markdown(report: ComparisonReport) -> str:
    """GitHub-flavoured Markdown: headline, tolerance, the check table, notes and details."""
    lines = [f"# dp-compare: {report.model}", "", headline(report) + ".", "",
             f"Tolerance ({report.dtype}, each leaf on its own, |Δ| ≤ atol + rtol·|b|): {tolerance_words(report)}.", "",
             "| check | compared | max \\|Δ\\| | rel ‖Δ‖ | verdict | worst leaf | detail |",
             "|---|---|---:|---:|---|---|---|"]
    for check in report.checks:
        lines.append(f"| {check.subject} | {check.compared} | {format_number(check.max_abs)} | "
                     f"{format_number(check.rel_norm)} | **{verdict(check)}** | {worst_leaf(check)} | "
                     f"{check.detail.replace('|', '/')} |")
    failing = [(check, leaf_lines(check)) for check in report.failures if check.leaves]
    lines += [line for check, leaves in failing
              for line in ["", f"Failing leaves of {check.subject} ({check.compared})"
                           + (f", cause {check.cause}" if check.cause else "") + ":", *leaves]]
    lines += layer_markdown(report)
    lines += ["", *(f"- note: {note}" for note in report.notes), *(["", drift_words(report)] if report.drift else []),
              "",
              f"**{'OK' if report.ok else 'FAILED'}**: {len(report.checks) - len(report.failures)}"
              f"/{len(report.checks)} checks passed.", *bench_markdown(report), ""]
    return "\n".join(lines)
