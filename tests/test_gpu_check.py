"""benchmarks/gpu_check.sh, run here with --dry-run: every step up to the CUDA calls, one folder of results.

The script has not met a GPU in this suite; this checks that on a CPU it runs each step, writes
each file, and reports a failing step as a failure (the exit status a GPU run is judged by).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"
FILES = {"summary.txt", "pytest.log", "pytest.xml", "device_lists.json", "device_lists.log", "benchmarks.log",
         "results.json", "performance.md", "benchmarks_rest.log", "results_rest.json",
         *(f"bench_{pair}.{ext}" for pair in ("mlp", "cnn_bn", "gpt2") for ext in ("json", "log"))}


def run_script(out: Path, *, python: str = sys.executable,
               extra_env: dict | None = None) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key != "XLA_FLAGS"}
    env.update({"PYTHON": python, **(extra_env or {})})
    return subprocess.run(["bash", str(SCRIPT), "--dry-run", str(out)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=1200)


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_check")
    done = run_script(out)
    return done, out


def test_dry_run_passes_and_writes_every_file_to_one_folder(dry_run):
    done, out = dry_run
    assert done.returncode == 0, done.stdout + done.stderr
    assert FILES <= {p.name for p in out.iterdir()}
    summary = (out / "summary.txt").read_text()
    steps = [line.split()[0] for line in summary.splitlines() if " rc=" in line]
    assert steps == ["pytest-gpu", "device-lists", "benchmarks", "benchmarks-rest", "bench-mlp", "bench-cnn_bn",
                     "bench-gpt2"]
    assert all(" ok " in line for line in summary.splitlines() if " rc=" in line), summary
    assert "dry run: 1" in summary and "no GPU" in summary


def test_dry_run_selects_the_gpu_tests_and_they_skip_without_cuda(dry_run):
    _, out = dry_run
    log = (out / "pytest.log").read_text()
    assert "tests/dp_torch/test_torch_gpu.py" in (out / "summary.txt").read_text()
    assert "skipped" in log and "passed" not in log and "failed" not in log


def test_device_lists_and_benchmark_results_are_well_formed(dry_run):
    _, out = dry_run
    lists = json.loads((out / "device_lists.json").read_text())
    labels = {row["case"] for row in lists["rows"]}
    assert {"device_ids=None", "device_ids=[0]", "device_ids=[0, 0]"} <= labels
    assert lists["dry_run"] is True and {row["batch"] for row in lists["rows"]} == {1, 5, 16}
    results = json.loads((out / "results.json").read_text())
    assert [section["id"] for section in results["sections"]] == ["train_step"]
    assert "crashed" not in results["sections"][0]


def test_the_bench_runs_time_every_side_of_two_builtin_pairs_and_a_hugging_face_pair(dry_run):
    _, out = dry_run
    for pair in ("mlp", "cnn_bn", "gpt2"):
        report = json.loads((out / f"bench_{pair}.json").read_text())
        assert report["ok"] and report["bench"]["ran"], pair
        sides = {row["side"] for row in report["bench"]["sides"]}
        assert {"dp_torch.DataParallel", "dp_jax shard_map, train_step", "jax.jit + NamedSharding (floor)"} <= sides
        assert all(row["min_s"] <= row["median_s"] <= row["max_s"] for row in report["bench"]["sides"])


def test_a_failing_step_fails_the_check_and_says_which(tmp_path):
    # a python that cannot run pytest or the benchmarks: every step must be reported FAILED
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho broken >&2\nexit 3\n")
    fake.chmod(0o755)
    done = run_script(tmp_path / "out", python=str(fake))
    assert done.returncode == 1
    summary = (tmp_path / "out" / "summary.txt").read_text()
    assert summary.count("FAILED") == 7 and "rc=3" in summary
