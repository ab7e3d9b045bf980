"""An NNX twin through the multi-process runs (`--processes 2`): 2 torch ranks beside 2 JAX processes x 2 devices,
the workers importing the user's module again. One real run (about 2 minutes on a busy 2-core machine): slow."""
from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
from _helpers_distributed import no_rank_left_behind  # noqa: F401

from comparisons.distributed import compare_distributed
from comparisons.models import pair as registry
from comparisons.models.user_pairs import load_pair

HELPERS = Path(__file__).resolve().parents[1] / "models"  # _nnx_twins.py: the NNX twins of the NNX tests
SEED = random.Random().randrange(1000)


@pytest.mark.slow
def test_an_nnx_twin_runs_in_every_process_and_agrees(tmp_path, monkeypatch):
    (tmp_path / "nnx_distributed_user.py").write_text(
        f"import sys\nsys.path.insert(0, {str(HELPERS)!r})\nfrom _nnx_twins import mlp_pair\nPAIR = mlp_pair()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        pair = load_pair("nnx_distributed_user:PAIR")
        assert repr(pair.jax_side) == "NNX"
        report = compare_distributed(pair, processes=2, devices=2, batch_size=8, steps=2, seed=SEED,
                                     imports=("nnx_distributed_user:PAIR",))
    finally:
        sys.modules.pop("nnx_distributed_user", None)
        registry._REGISTRY.pop("mlp_nnx", None)
    assert report.ok, report.render("markdown")
    jax_vs_torch = [c for c in report.checks if c.compared == "torch DataParallel x4 vs JAX multi-process"]
    assert {c.subject for c in jax_vs_torch} >= {"outputs", "gradients", "params_after_steps"}
