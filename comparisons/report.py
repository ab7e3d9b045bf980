"""ComparisonReport: the checks of one comparison, and its renderings (table, JSON, Markdown, HTML).

The JSON schema is documented in docs/report_schema.md; bump SCHEMA_VERSION on any change to it.
"""
from __future__ import annotations

import dataclasses
import io
import json
from typing import Any

from comparisons.placement import PlacementMap

SCHEMA_VERSION = 1
FORMATS = ("table", "json", "markdown", "html")


@dataclasses.dataclass(frozen=True)
class Check:
    """One verdict: `subject` (e.g. "outputs") compared on `compared` (e.g. "torch DP vs single").

    Numeric checks carry `max_abs` (max |a - b|) and `rel_norm` (||a - b|| / ||b||); they pass when
    either is within `tolerance`. Placement checks carry no numbers; `detail` says what differs.
    """

    subject: str
    compared: str
    passed: bool
    max_abs: float | None = None
    rel_norm: float | None = None
    tolerance: float | None = None
    detail: str = ""


@dataclasses.dataclass
class ComparisonReport:
    """Everything `compare` found; `ok` is True only if every check passed."""

    model: str
    batch_size: int
    devices: int
    chunk_sizes: list[int]
    strategies: list[str]
    steps: int
    optimizer: str
    dtype: str
    seed: int
    torch_devices: str
    tolerance: dict[str, float]
    checks: list[Check] = dataclasses.field(default_factory=list)
    placements: dict[str, PlacementMap] = dataclasses.field(default_factory=dict)
    notes: list[str] = dataclasses.field(default_factory=list)
    layers: dict[str, str] = dataclasses.field(default_factory=dict)  # torch layer -> Flax layer path

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(check.passed for check in self.checks)

    @property
    def failures(self) -> list[Check]:
        return [check for check in self.checks if not check.passed]

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form (docs/report_schema.md)."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {
            "schema_version": SCHEMA_VERSION, **fields, "ok": self.ok,
            "checks": [dataclasses.asdict(check) for check in self.checks],
            "placements": {name: pm.to_rows() for name, pm in self.placements.items()},
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def render(self, fmt: str) -> str:
        """The report as `fmt`: one of "table", "json", "markdown", "html"."""
        if fmt not in FORMATS:
            raise ValueError(f"render: format {fmt!r} is unknown; use one of {', '.join(FORMATS)}")
        if fmt == "json":
            return self.to_json()
        if fmt == "html":
            from comparisons._html import render_html

            return render_html(self)
        return to_markdown(self) if fmt == "markdown" else to_table(self)


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
    console.print(_rich_table(report))
    _print_footer(console, report)
    return buffer.getvalue()


def print_table(report: ComparisonReport, console: Any) -> None:
    """Prints the table to a rich `console` (with colour when it is a terminal)."""
    console.print(_rich_table(report))
    _print_footer(console, report)


def _rich_table(report: ComparisonReport):
    from rich.table import Table

    tolerance = report.tolerance["max_abs"]
    table = Table(title=f"{headline(report)}; tolerance {tolerance:.0e}", title_justify="left")
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
        console.print(f"note: {note}", markup=False)
    for check in report.failures:
        console.print(f"FAIL {check.subject} ({check.compared}): {check.detail}", markup=False)
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
