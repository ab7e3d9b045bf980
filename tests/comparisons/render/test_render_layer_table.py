"""The layer table keeps every layer name and every figure whole, at any width and in a pipe.

A user reads the table for the names: where torch and Flax part. A terminal too narrow for the table
drops `rel` first, then prints each row as a short block; a pipe prints the table at its natural width.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
from _helpers_harness import small_report
from hypothesis import given, settings
from hypothesis import strategies as st

from comparisons.cli import emit
from comparisons.render import format_number, to_table

VERDICTS = (("agree", None), ("rounding", None), ("differs", "port"), ("differs", "rounding"), ("missing", None))


def side(rng) -> dict:
    verdict, cause = VERDICTS[int(rng.integers(len(VERDICTS)))]
    figure = None if verdict == "missing" else float(rng.uniform(0, 1e-2))
    return {"verdict": verdict, "cause": cause, "max_abs": figure, "rel": figure and figure * 3, "message": ""}


def name(rng) -> str:
    parts = ["blocks", str(int(rng.integers(12))), str(rng.choice(["attention", "mlp", "norm"])),
             str(rng.choice(["q_proj", "output_projection_dense", "fc_in"]))]
    return ".".join(parts[:int(rng.integers(1, 5))])


def with_layer_view(seed: int):
    rng = np.random.default_rng(seed)
    report = small_report(bool(rng.integers(2)), seed)
    report.layer_view = [{"torch": name(rng), "flax": name(rng).replace(".", "/"),
                          "kind": str(rng.choice(["linear", "layer_norm", "embedding"])),
                          "call": int(rng.integers(3)), "input": side(rng), "output": side(rng)}
                         for _ in range(int(rng.integers(1, 7)))]
    return report


def figures(row: dict, with_rel: bool) -> list[str]:
    numbers = [format_number(row["input"]["max_abs"]), format_number(row["output"]["max_abs"])]
    return numbers + ([format_number(row["output"]["rel"])] if with_rel else [])


def assert_every_row_readable(text: str, report, with_rel: bool) -> None:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if "layers, torch beside Flax" in line)
    for row in report.layer_view:  # in torch's order: each row's line comes after the one before
        where = next(i for i in range(start, len(lines))
                     if re.search(rf"(^|[│ ]){re.escape(row['torch'])}[ │]", lines[i])
                     and re.search(rf"[│ ]{re.escape(row['flax'])}( |$)", "\n".join(lines[i:i + 2])))
        block = "\n".join(lines[where:where + 4])
        for figure in figures(row, with_rel):
            assert figure in block, (row, block)
        assert "…" not in block, block
        start = where + 1


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), width=st.sampled_from([60, 80, 100, 200]))
def test_a_terminal_of_any_width_shows_every_name_and_every_max_figure(seed, width):
    report = with_layer_view(seed)
    text = to_table(report, width=width)
    assert_every_row_readable(text, report, with_rel=width >= 200)
    longest = max(len(row[key]) for row in report.layer_view for key in ("torch", "flax"))
    layer_part = text.split("layers, torch beside Flax")[1].split("first divergence")[0]
    assert all(len(line) <= max(width, longest + 25) for line in layer_part.splitlines()), text


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_a_pipe_prints_one_line_per_layer_with_every_column(seed):
    report = with_layer_view(seed)
    text = report.render("table")
    assert_every_row_readable(text, report, with_rel=True)
    assert "┃ layer (torch) " in text and " rel " in text.split("layers, torch beside Flax")[1]


@pytest.mark.parametrize("columns", ["60", "100"])
def test_the_cli_in_a_pipe_keeps_the_names_whatever_COLUMNS_says(columns, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", columns)
    report = with_layer_view(int(np.random.default_rng().integers(10_000)))
    emit(report, "table", None)  # capsys's stdout is no terminal, as in `... | cat`
    assert_every_row_readable(capsys.readouterr().out, report, with_rel=True)


def test_a_narrow_terminal_prints_blocks_whose_lines_fit_it():
    report = with_layer_view(3)
    for row in report.layer_view:
        row["torch"], row["flax"] = "blocks.1.mlp.fc_in", "blocks/1/mlp/fc_in"
    text = to_table(report, width=60)
    layer_part = text.split("layers, torch beside Flax")[1].split("first divergence")[0]
    assert "┃" not in layer_part and all(len(line) <= 60 for line in layer_part.splitlines())
