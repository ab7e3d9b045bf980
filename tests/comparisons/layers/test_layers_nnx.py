"""The layer view of an NNX twin: every mapped NNX module's calls recorded through nnx.capture (no edit to the
model), lined up with torch's hooks, the first divergence at the planted layer."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parents[1] / "models"))
from _nnx_twins import lm_pair  # noqa: E402

from comparisons import compare  # noqa: E402


def test_the_layer_view_of_an_nnx_twin_finds_the_norm_whose_epsilon_differs():
    seed = int(np.random.default_rng().integers(0, 1000))
    report = compare(lm_pair(torch_eps=1e-5, seed=seed), batch_size=7, devices=4, seed=seed, strategies=["explicit"],
                     layers=True, torch_devices="cpu")
    rows = report.layer_view
    assert [row["torch"] for row in rows][:3] == ["embed", "blocks.0.norm1", "blocks.0.q"]
    assert all(row["output"]["verdict"] in ("agree", "differs") for row in rows), rows  # none missing
    assert rows[0]["output"]["verdict"] == "agree"
    first = report.first_divergence
    assert (first["torch"], first["cause"]) == ("blocks.0.norm1", "port"), first
    assert "epsilon" in first["message"]
    assert report.replica_divergences is not None
