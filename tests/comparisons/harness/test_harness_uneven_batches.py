"""The harness on uneven batches: `python -m comparisons run --batch B --devices 4` for every batch 1..9
runs every strategy and passes every check, and the padding section measures what padding the last chunk
would change without judging it. Two cases run the real CLI in a fresh process, as a user would start it
(default tier); the rest of the matrix runs the same command through the CLI's `main()` in this process
(slow tier), which shares its compiled programs across cases instead of starting 34 processes from cold.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from _chunks import torch_chunk_sizes
from _helpers_harness import run_cli

from comparisons import compare
from comparisons.cli import main
from dp_jax import STRATEGIES

MODELS = ("mlp", "cnn_bn", "embedding_lstm", "transformer_block")
DEFAULT = {("mlp", 5), ("cnn_bn", 7)}  # batch 5 on 4: the kwargs bug; cnn_bn 7: BatchNorm, chunks 2, 2, 2, 1


RUN_ARGS = ("--devices", "4", "--format", "json", "--torch-devices", "cpu")


def run_json(model: str, batch: int) -> dict:
    """The CLI's JSON report of `run --model M --batch B --devices 4 --torch-devices cpu`, in a fresh process."""
    result = run_cli("run", "--model", model, "--batch", str(batch), *RUN_ARGS, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(result.stdout)


def main_json(model: str, batch: int, folder: Path) -> dict:
    """The same command through the CLI's own `main()` in this process: its parser and defaults, one JAX."""
    out = folder / f"{model}-{batch}.json"
    assert main(["run", "--model", model, "--batch", str(batch), *RUN_ARGS, "--out", str(out)]) == 0
    return json.loads(out.read_text())


def assert_every_strategy_passes(report: dict, batch: int) -> None:
    assert report["strategies"] == list(STRATEGIES)
    assert report["ok"] and all(check["passed"] for check in report["checks"])
    assert report["chunk_sizes"] == torch_chunk_sizes(batch, 4)


@pytest.mark.parametrize("model,batch", sorted(DEFAULT))
def test_the_cli_runs_every_strategy_on_an_uneven_batch_and_passes(model, batch):
    assert_every_strategy_passes(run_json(model, batch), batch)


@pytest.mark.slow
@pytest.mark.parametrize("model,batch", [(model, batch) for model in MODELS for batch in range(1, 10)
                                         if (model, batch) not in DEFAULT])
def test_every_strategy_runs_every_batch_and_passes(model, batch, tmp_path):
    assert_every_strategy_passes(main_json(model, batch, tmp_path), batch)


def padding_lines(report) -> dict[str, str]:
    return {line.split(",")[0].removeprefix("padding: "): line for line in report.notes
            if line.startswith("padding: ")}


def test_padding_section_measures_what_padding_changes_and_judges_nothing():
    # cnn_bn, 11 rows on 4 devices: chunks 3, 3, 3, 2; padding copies row 10 into the last chunk, whose
    # BatchNorm statistics (training mode) then move: its outputs and every gradient change
    report = compare("cnn_bn", batch_size=11, devices=4, strategies=["explicit", "pmap"], steps=2,
                     torch_devices="cpu", padding=True)
    assert report.ok  # the verdicts are exact dp_jax's; the padding lines are measurements only
    headline = next(line for line in report.notes if line.startswith("padding ("))
    assert "batch 11 on 4 devices pads the last chunk (2 rows) with 1 copy of its last row to 3 rows" in headline
    lines = padding_lines(report)
    assert set(lines) == {"outputs", "gradients", "batch_stats", "params_after_steps"}
    def max_abs(subject):
        return float(re.search(r"max_abs ([0-9.e+-]+)", lines[subject])[1])
    assert max_abs("outputs") > 1e-2 and "beyond the tolerance" in lines["outputs"]
    assert max_abs("gradients") > 1e-4 and max_abs("params_after_steps") > 1e-6
    assert max_abs("batch_stats") < 1e-5  # replica 0's statistics: chunk 0 is never padded


def test_padding_section_on_equal_chunks_says_padding_changes_nothing():
    report = compare("mlp", batch_size=8, devices=4, strategies=["shard_map"], steps=1, torch_devices="cpu",
                     padding=True)
    assert any("batch 8 on 4 devices splits into equal chunks, so padding changes nothing" in line
               for line in report.notes)
    assert not padding_lines(report)


def test_padding_must_be_a_bool():
    with pytest.raises(ValueError, match=r"compare: padding='yes' is not a bool"):
        compare("mlp", padding="yes")
