"""`run --bench` / compare(bench=True): a step-time table with the spread for every side once every check
passed, the HTML's chart after the verdict; a twin with a planted bug gets no figure and one line saying why."""
from __future__ import annotations

import json
import re

import _twins
import numpy as np
import pytest
from _helpers_harness import ROOT, run_cli

from comparisons import compare
from comparisons.errors import ComparisonError
from comparisons.harness import STRATEGIES, Settings

MAPPED = [s for s in STRATEGIES if s != "explicit"]
SMALL = ("--batch", "4", "--devices", "2", "--steps", "1", "--precision", "off")


def expected_sides() -> set[str]:
    """Every side the brief names for a CPU run (stock torch DataParallel cannot run there)."""
    return ({"torch, one device", "dp_torch.DataParallel", "jax.jit, one device", "jax.jit + NamedSharding (floor)"}
            | {f"dp_jax {s}, eager apply + optax" for s in STRATEGIES} | {f"dp_jax {s}, train_step" for s in MAPPED})


def table_rows(stdout: str) -> dict[str, list[float]]:
    """{side: [median, min, max, first call, x torch DP, x floor]} read from the printed step-time table."""
    rows = {}
    for line in stdout.splitlines():
        cells = [cell.strip() for cell in line.strip("│ ").split("│")]
        if len(cells) == 7 and re.fullmatch(r"[\d.]+", cells[1]):
            rows[cells[0]] = [float(cell) for cell in cells[1:]]
    return rows


@pytest.fixture(scope="module")
def demo_bench():
    done = run_cli("run", "--model", "cnn_bn", *SMALL, "--bench", "--bench-steps", "3", timeout=600)
    return done


def test_run_bench_prints_a_step_time_table_with_the_spread_for_every_side(demo_bench):
    assert demo_bench.returncode == 0, demo_bench.stdout + demo_bench.stderr
    out = demo_bench.stdout
    rows = table_rows(out)
    assert set(rows) == expected_sides(), out
    for side, (median, low, high, first, *_ratios) in rows.items():
        assert 0 < low <= median <= high, (side, rows[side])
        assert first > 0
    assert rows["jax.jit + NamedSharding (floor)"][5] == 1.0 and rows["dp_torch.DataParallel"][4] == 1.0
    some = rows["dp_jax shard_map, train_step"]
    assert some[5] == pytest.approx(some[0] / rows["jax.jit + NamedSharding (floor)"][0], rel=0.02, abs=0.01)
    assert out.index("checks passed") < out.index("Step time per side")  # the verdict first
    assert "torch.nn.DataParallel not timed: cannot run on virtual devices" in out
    assert "overheads only" in out and "load average" in out


def test_compare_bench_json_and_html_chart_come_after_the_verdict():
    report = compare("cnn_bn", batch_size=4, devices=2, steps=1, precision="off", bench=True, bench_steps=2,
                     torch_devices="cpu")  # 'auto' would install virtual devices in this process (tests/conftest.py)
    assert report.ok
    section = json.loads(report.to_json())["bench"]
    assert section["ran"] and section["rounds"] == 2 and not section["absolute"]
    assert {row["side"] for row in section["sides"]} == expected_sides()
    floor = next(row for row in section["sides"] if row["side"].endswith("(floor)"))
    for row in section["sides"]:
        assert row["min_s"] <= row["median_s"] <= row["max_s"]
        assert row["vs_floor"] == pytest.approx(row["median_s"] / floor["median_s"])
    assert len(section["machine"]["load_average"]) == 3
    schema = (ROOT / "docs" / "report_schema.md").read_text().split("## Bench", 1)[1]
    for field in {*section, *section["machine"], *section["sides"][0], *section["not_run"][0]}:
        assert f"`{field}`" in schema, field
    page = report.render("html")
    chart = page.index("<section class=bench>")
    assert page.index("class=verdict") < chart and "<svg" in page[chart:page.index("</section>", chart)]
    assert "overheads only" in page[chart:]
    assert "Step time per side" in report.render("markdown")


def test_a_planted_bug_prints_no_figure_and_says_why():
    twin = _twins.make("conv_padding", seed=int(np.random.default_rng().integers(1000)))
    report = compare(twin, batch_size=4, devices=2, steps=1, precision="off", strategies=["shard_map"], bench=True,
                     torch_devices="cpu")
    assert not report.ok
    table = report.render("table")
    assert "bench: no figure:" in table and "computed different things" in table
    assert "Step time per side" not in table and not table_rows(table)
    assert report.bench["sides"] == [] and not report.bench["ran"]
    page = report.render("html")
    section = page[page.index("<section class=bench>"):]
    assert "no figure" in section and "<svg" not in section[:section.index("</section>")]


@pytest.mark.parametrize("field, value", [("bench", "yes"), ("bench", 1), ("bench_steps", 0), ("bench_steps", 2.5)])
def test_bench_settings_are_checked_once_with_named_errors(field, value):
    with pytest.raises(ComparisonError, match=f"{field}={value!r}"):
        Settings(**{field: value})


def test_bench_steps_without_bench_is_refused_naming_the_flag():
    done = run_cli("run", "--model", "mlp", "--bench-steps", "3")
    assert done.returncode == 2 and "--bench-steps 3" in done.stderr and "add --bench" in done.stderr
