"""`run --processes P --bench`: DDP's step beside the multi-process JAX step, timed only once every check passed.

Two real runs (slow tier): the CLI on a built-in pair (both sides timed, the table shows them) and a pair with
a planted bug (no figure, one line why, and no bench launch). The rest is fast: the slowest-rank reduction
and the refusal of --bench-steps without --bench.
"""
from __future__ import annotations

import json
import random
import re
import sys
import textwrap

import pytest
from _helpers_distributed import no_rank_left_behind  # noqa: F401
from _helpers_harness import ROOT, run_cli

from comparisons.distributed.bench import DDP, JAX, slowest
from comparisons.distributed.bench import section as bench_section
from comparisons.distributed.compare import compare_distributed


def table_rows(text: str) -> dict[str, list[str]]:
    """{side: [median, min, max, first call, x torch DP, x floor]} read from the printed step-time table."""
    rows = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip("│ ").split("│")]
        if len(cells) == 7 and re.fullmatch(r"[\d.]+", cells[1]):
            rows[cells[0]] = cells[1:]
    return rows


@pytest.mark.slow
def test_ddp_and_multi_process_jax_get_their_step_times_once_the_checks_pass():
    devices = random.choice([1, 2])
    flax = random.choice(["nnx", "linen"])  # multihost_nnx.py or jax_worker's linen step: each times its step
    report = compare_distributed("mlp", processes=2, devices=devices, batch_size=4, steps=1, bench=True,
                                 bench_steps=2, seed=random.randrange(1000), timeout=300, flax=flax)
    assert report.ok, report.render("table")
    table = report.render("table")
    rows = table_rows(table)
    assert set(rows) == {DDP, JAX}, table
    for side, (median, low, high, first, _vs_ddp, vs_floor) in rows.items():
        assert 0 < float(low) <= float(median) <= float(high), (side, rows[side])
        assert float(first) > 0 and vs_floor == "-"
    assert rows[DDP][4] == "1"
    assert table.index("checks passed") < table.index("Step time per side")  # the verdict first
    assert f"2 process(es) x {devices} cpu device(s)" in table and "load average" in table
    section = json.loads(report.to_json())["bench"]
    assert section["ran"] and section["rounds"] == 2 and section["machine"]["processes"] == 2
    ddp = next(row for row in section["sides"] if row["side"] == DDP)
    for row in section["sides"]:
        assert row["min_s"] <= row["median_s"] <= row["max_s"] and row["first_s"] > 0
        assert row["vs_torch_dp"] == pytest.approx(row["median_s"] / ddp["median_s"])
    schema = (ROOT / "docs" / "report_schema.md").read_text().split("## Bench", 1)[1]
    for field in {*section, *section["machine"], *section["sides"][0]}:
        assert f"`{field}`" in schema, field
    page = report.render("html")
    assert "<svg" in page[page.index("<section class=bench>"):]


BUGGY = """
    import dataclasses

    import jax.numpy as jnp
    from tiny_pairs import TINY

    # the planted bug: the JAX loss weighs the error {scale} times what torch's does
    BUGGY = dataclasses.replace(TINY, name="tiny_buggy_{seed}",
                                loss_jax=lambda output, target: {scale} * jnp.mean(jnp.square(output - target)))
"""


@pytest.mark.slow
def test_a_planted_bug_prints_no_figure_and_says_why(tmp_path, monkeypatch):
    seed = random.randrange(1000)
    scale = random.choice([1.5, 2.0, 3.0])
    (tmp_path / "tiny_pairs.py").write_text((ROOT / "tests/comparisons/user_pairs_fixture/tiny_pairs.py").read_text())
    (tmp_path / "buggy_pairs.py").write_text(textwrap.dedent(BUGGY.format(scale=scale, seed=seed)))
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        import buggy_pairs

        report = compare_distributed(buggy_pairs.BUGGY, processes=2, devices=1, batch_size=4, steps=1,
                                     imports=("buggy_pairs:BUGGY",), bench=True, bench_steps=2, timeout=300)
    finally:
        for name in ("tiny_pairs", "buggy_pairs"):
            sys.modules.pop(name, None)
        from comparisons.models import pair as registry

        registry._REGISTRY.pop(f"tiny_buggy_{seed}", None)
    assert not report.ok
    assert not report.bench["ran"] and report.bench["sides"] == []
    table = report.render("table")
    assert "bench: no figure:" in table and "computed different things" in table
    assert "Step time per side" not in table and not table_rows(table)


def test_the_slowest_rank_sets_each_steps_time():
    rng = random.Random()
    steps = rng.randrange(2, 6)
    ranks = [{"first_s": rng.uniform(1, 2), "times": [rng.uniform(0.01, 1) for _ in range(steps)]} for _ in range(3)]
    timing = slowest(ranks)
    per_step = sorted(max(rank["times"][i] for rank in ranks) for i in range(steps))
    assert (timing.min_s, timing.max_s, timing.steps) == (per_step[0], per_step[-1], steps)
    assert per_step[0] <= timing.median_s <= per_step[-1]
    assert timing.first_s == max(rank["first_s"] for rank in ranks)


def test_bench_steps_without_bench_is_refused_with_processes_too():
    steps = str(random.randrange(2, 9))
    done = run_cli("run", "--model", "mlp", "--processes", "2", "--bench-steps", steps)
    assert done.returncode == 2 and f"--bench-steps {steps}" in done.stderr and "add --bench" in done.stderr


def test_a_jax_only_bench_has_no_ddp_ratio_and_a_failed_check_no_figure():
    from comparisons.bench import Timing
    from comparisons.render.bench import bench_rows, bench_words
    from comparisons.verdicts import Check

    rng = random.Random()
    low = rng.uniform(0.001, 0.1)
    timing = Timing(rng.uniform(1, 2), low * 1.5, low, low * 2, 3)
    passed = [Check(subject="outputs", compared="a vs b", passed=True)]
    section = bench_section(passed, {"jax": timing}, 2, rng.choice([1, 2]))
    assert section["ran"] and section["torch_dp_side"] is None
    assert bench_rows(section) == [(JAX, f"{1500 * low:.3f}", f"{1000 * low:.3f}", f"{2000 * low:.3f}",
                                    f"{1000 * timing.first_s:.3f}", "-", "-")]
    assert "None" not in " ".join(bench_words(section))
    failed = [*passed, Check(subject="loss", compared="a vs b", passed=False)]
    refused = bench_section(failed, {"jax": timing}, 2, 1)
    assert not refused["ran"] and refused["sides"] == [] and "1 of 2 checks failed" in refused["reason"]
