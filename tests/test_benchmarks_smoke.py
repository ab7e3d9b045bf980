"""`python -m benchmarks --quick` runs end to end and writes a well-formed table, JSON and page.

Smoke test only: it never asserts timings, just that every section measures (or names why it
may not), and that every ratio is a positive finite number with a consistent spread. A crash
anywhere fails it: the runner exits 1 on a crashed section, and no row may be an error.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = {"jax_strategies", "torch_stock", "train_step", "nnx_train_step", "breakdown", "replication", "harness",
            "virtual"}
SKIPPED_IN_QUICK = {"harness", "virtual"}  # each starts a second interpreter


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("benchmarks")
    env = {key: value for key, value in os.environ.items() if key != "XLA_FLAGS"}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--json", str(out / "results.json"),
         "--write-docs", str(out / "performance.md")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout, json.loads((out / "results.json").read_text()), (out / "performance.md").read_text()


def rows_of_kind(results, kind):
    return [row for section in results["sections"] for row in section["rows"] if kind in row]


def test_quick_run_measures_every_section_but_the_two_it_skips_and_no_row_failed(quick_run):
    _, results, _ = quick_run
    assert {section["id"] for section in results["sections"]} == SECTIONS
    for section in results["sections"]:
        assert "crashed" not in section, section
        if section["id"] in SKIPPED_IN_QUICK:
            assert section["unavailable"].startswith("skipped in --quick"), section
            assert section["rows"] == []
        else:
            assert section["unavailable"] is None and section["rows"], section
        failed = [row for row in section["rows"] if "error" in row]
        assert failed == [], f"{section['id']}: {failed}"


def test_every_ratio_is_a_positive_finite_number_inside_its_own_spread(quick_run):
    _, results, _ = quick_run
    ratios = [row["ratio"] for row in rows_of_kind(results, "ratio")]
    assert ratios, "a quick run measured no ratio at all"
    for ratio in ratios:
        figures = [ratio[key] for key in ("median", "min", "max", "a_s", "b_s")]
        assert all(math.isfinite(f) and f > 0 for f in figures), ratio
        quartiles = (ratio["q1"], ratio["q3"]) if ratio["q1"] is not None else (ratio["median"],) * 2
        assert ratio["min"] <= quartiles[0] <= ratio["median"] <= quartiles[1] <= ratio["max"], ratio


def test_jax_strategies_compare_each_strategy_with_single_device_jit(quick_run):
    _, results, _ = quick_run
    (section,) = [s for s in results["sections"] if s["id"] == "jax_strategies"]
    measured = {(row["labels"]["strategy"], row["labels"]["mode"]) for row in section["rows"] if "ratio" in row}
    assert {("reference", "fwd"), ("reference", "fwd+bwd")} <= measured


def test_step_shares_of_one_forward_sum_to_one(quick_run):
    _, results, _ = quick_run
    rows = rows_of_kind(results, "shares")
    assert rows
    for row in rows:
        assert set(row["shares"]) == {"scatter", "replicate", "parallel_apply", "gather"}
        assert all(0 < share["median"] < 1 for share in row["shares"].values())


def test_table_and_page_show_the_machine_and_every_section(quick_run):
    stdout, results, page = quick_run
    for section in results["sections"]:
        assert f"## {section['title']}" in stdout and f"## {section['title']}" in page
    for key in ("cpu", "cores", "python", "torch", "jax"):
        assert f"**{key}**: {results['machine'][key]}" in page
    assert "```python" not in page  # docs/ python blocks are executed by test_docs


def test_regenerating_the_page_keeps_its_hand_written_head(tmp_path):
    from benchmarks import docs_page

    page = tmp_path / "performance.md"
    results = {"machine": {"cpu": "test-cpu"}, "quick": False, "sections": []}
    docs_page.write(results, page)
    edited = page.read_text().replace(docs_page.MARKER, f"Findings {tmp_path.name}.\n\n{docs_page.MARKER}")
    page.write_text(edited.replace("test-cpu", "stale-cpu"))
    docs_page.write(results, page)
    text = page.read_text()
    assert f"Findings {tmp_path.name}." in text and "test-cpu" in text and "stale-cpu" not in text


def run_only(module_run, tmp_path, monkeypatch) -> tuple[int, dict]:
    """benchmarks.runner.run with one section whose run() is ``module_run``."""
    from benchmarks import runner

    module = types.ModuleType("planted_section")
    module.run = module_run
    monkeypatch.setitem(sys.modules, "planted_section", module)
    monkeypatch.setitem(runner.MODULES, "planted", "planted_section")
    monkeypatch.setattr(runner, "use_one_torch_thread", lambda: None)  # keep this process's threads
    args = argparse.Namespace(device="cpu", quick=True, only=["planted"], json=tmp_path / "results.json",
                              write_docs=None)
    code = runner.run(args)
    return code, json.loads(args.json.read_text())["sections"][0]


def test_a_crashing_section_fails_the_run_and_is_not_called_unavailable(tmp_path, monkeypatch, capsys):
    def crash(ctx):
        raise ZeroDivisionError(f"planted in {tmp_path.name}")

    code, section = run_only(crash, tmp_path, monkeypatch)
    assert code == 1
    assert section["unavailable"] is None
    assert section["crashed"] == f"ZeroDivisionError: planted in {tmp_path.name}"
    assert f"section 'planted' crashed: ZeroDivisionError: planted in {tmp_path.name}" in capsys.readouterr().err


@pytest.mark.parametrize(("reason", "code"), [
    ("skipped in --quick (too slow)", 0),
    ("CPU-only: virtual devices emulate accelerators on a CPU", 0),
    ("bench_virtual.py failed (rc 1): Traceback", 1),  # a crash in a child process
])
def test_only_named_reasons_may_leave_a_section_unmeasured(tmp_path, monkeypatch, reason, code):
    from benchmarks.results import Section

    def measure_nothing(ctx):
        return Section("planted", "Planted", "nothing", unavailable=reason or None)

    assert run_only(measure_nothing, tmp_path, monkeypatch)[0] == code


def test_a_quick_run_writes_nothing_into_the_repository_and_is_refused_a_docs_page(tmp_path):
    """--quick figures are a smoke test: no default JSON, no docs page (refused before any section runs)."""
    env = {key: value for key, value in os.environ.items() if key != "XLA_FLAGS"}
    page = ROOT / "docs" / "performance.md"
    before = page.read_text()
    refused = subprocess.run([sys.executable, "-m", "benchmarks", "--quick", "--write-docs"], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "never go into docs/" in refused.stderr
    assert "[benchmarks]" not in refused.stderr  # refused before any section ran
    results = ROOT / "benchmarks" / "results.json"
    stamp = results.stat().st_mtime_ns if results.exists() else None
    done = subprocess.run([sys.executable, "-m", "benchmarks", "--quick", "--only", "breakdown"], cwd=tmp_path,
                          env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "wrote" not in done.stderr and page.read_text() == before
    assert (results.stat().st_mtime_ns if results.exists() else None) == stamp
