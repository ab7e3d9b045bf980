"""The text table at any width: the verdict first, no column dropped or cut, and one line per row in a pipe.

A terminal of 60, 80 or 200 columns wraps the check and compared cells but keeps every column and
every character; with no terminal (CI, `| tee`, a file) the table is as wide as it needs.
"""
from __future__ import annotations

import random
import re

import pytest
from _helpers_harness import small_report
from _table_cells import COLUMNS, header, rows, squeezed, table_lines

from comparisons.cli import emit
from comparisons.render import format_number, to_table, verdict
from comparisons.render.text import shown_leaves
from comparisons.verdicts import Check

SEED = random.Random().randrange(10_000)
LONG = ("torch DDP rank 1 vs rank 0 (rank 0 and replica 0 keep chunk 0's)", "batch_stats_after_steps (by design)")


def report_with_long_cells(seed: int):
    """small_report plus a multi-process-like check whose names are longer than an 80-column row."""
    report = small_report(passed=False, seed=seed)
    rng = random.Random(seed)
    report.checks.insert(rng.randrange(len(report.checks) + 1),
                         Check(LONG[1], LONG[0], rng.random() < 0.5, rng.uniform(1e-4, 1e-2), rng.random(), 1e-5))
    return report


def expected_rows(report) -> list[list[str]]:
    """What each row must hold, from the report's own fields (not from the renderer)."""
    expected = []
    for check in report.checks:
        expected.append([verdict(check), check.subject, check.compared, format_number(check.max_abs),
                         format_number(check.rel_norm)])
        for leaf in shown_leaves(check):
            bound = f" ≤ atol {leaf.atol:.0e}" if leaf.passed and leaf.atol is not None else ""
            expected.append(["ok" if leaf.passed else leaf.cause or leaf.kind, "", f"└ {leaf.path}{bound}",
                             format_number(leaf.max_abs), format_number(leaf.rel)])
    return [[squeezed(cell) for cell in row] for row in expected]


@pytest.mark.parametrize("width", [60, 80, 200])
@pytest.mark.parametrize("draw", [0, 1])  # ids fixed (pytest-xdist's workers must collect the same tests)
def test_a_terminal_of_any_width_keeps_every_column_and_every_character(width, draw):
    report = report_with_long_cells(SEED + draw)
    text = to_table(report, width=width)
    assert all(len(line) <= width for line in table_lines(text)), text
    assert header(text) == COLUMNS, text
    assert rows(text) == expected_rows(report), (SEED + draw, text)


def test_a_narrow_terminal_wraps_the_long_names_instead_of_widening():
    text = to_table(report_with_long_cells(SEED), width=60)
    assert not any(LONG[0] in line for line in table_lines(text))  # wrapped, yet whole in rows() above


@pytest.mark.parametrize("environment", [{}, {"COLUMNS": "80"}, {"FORCE_COLOR": "1", "COLUMNS": "80"}],
                         ids=["pipe", "pipe-COLUMNS-80", "CI-forced-colour"])
def test_with_no_terminal_each_row_is_one_line_led_by_its_verdict(environment, capsys, monkeypatch):
    for name in ("COLUMNS", "FORCE_COLOR", "LINES"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    report = report_with_long_cells(SEED)
    emit(report, "table", None)  # capsys's stdout is no terminal, as under CI or `| tee`
    text = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)  # FORCE_COLOR colours it
    for check in report.checks:
        line = next(line for line in text.splitlines() if f" {check.compared} " in line and check.subject in line)
        assert line.startswith(f"│ {verdict(check)} ") or f"{verdict(check)}" in line.split("│")[1], line
    assert rows(text) == expected_rows(report)
    assert len([line for line in table_lines(text) if line.startswith("│")]) == len(expected_rows(report))
