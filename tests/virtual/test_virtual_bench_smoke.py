"""benchmarks/bench_virtual.py runs end to end in --quick mode (timings are never asserted)."""
import importlib.util
import json
from pathlib import Path

import torch

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_virtual.py"


def _load_bench():
    spec = importlib.util.spec_from_file_location("bench_virtual", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quick_benchmark_prints_a_table_and_writes_json(tmp_path, capsys):
    out = tmp_path / "bench.json"
    rows = _load_bench().main(["--quick", "--json", str(out)])
    written = json.loads(out.read_text())
    assert written["torch"] == torch.__version__
    assert written["rows"] == rows
    assert [r["width"] for r in rows] == [16, 32]
    for r in rows:
        assert r["cpu_ms"] > 0 and r["vdev_ms"] > 0
        assert r["ratio_min"] <= r["ratio_median"] <= r["ratio_max"]
    table = capsys.readouterr().out
    assert "ratio" in table and len(table.strip().splitlines()) == 2 + len(rows)
