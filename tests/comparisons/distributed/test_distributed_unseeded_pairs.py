"""A pair built when its module is imported, unseeded (pair_from_modules on a module made there), gets the same
weights in every worker of a multi-process run and in the parent: the launcher seeds before the import, and two
identical runs print identical figures (issue 36)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from _helpers_harness import ROOT

UNSEEDED = '''
import numpy as np
import torch
from flax import linen as nn

from comparisons.models import pair_from_modules


class FlaxNet(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool = False):
        return nn.Dense(3, name="head")(jnp_tanh(nn.Dense(5, name="fc")(x)))


def jnp_tanh(x):
    import jax.numpy as jnp
    return jnp.tanh(x)


def features(batch_size, seed, dtype):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((batch_size, 4)).astype(dtype),), rng.standard_normal((batch_size, 3)).astype(dtype)


def mse_torch(output, targets):
    return ((output - targets) ** 2).mean()


def mse_jax(output, targets):
    return ((output - targets) ** 2).mean()


torch_net = torch.nn.Sequential()
torch_net.add_module("fc", torch.nn.Linear(4, 5))
torch_net.add_module("act", torch.nn.Tanh())
torch_net.add_module("head", torch.nn.Linear(5, 3))
pair = pair_from_modules("unseeded_net", torch_net, FlaxNet(), make_inputs=features, loss_torch=mse_torch,
                         loss_jax=mse_jax)
'''


def test_an_unseeded_pair_made_on_import_passes_under_processes(tmp_path):
    (tmp_path / "unseeded_pairs.py").write_text(UNSEEDED)
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["PYTHONPATH"] = f"{tmp_path}{os.pathsep}{ROOT}"
    result = subprocess.run([sys.executable, "-m", "comparisons", "run", "--pair", "unseeded_pairs:pair",
                             "--processes", "2", "--devices", "1", "--batch", "4", "--steps", "1",
                             "--seed", "7"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "checks passed" in result.stdout


def figures(report: dict) -> list[tuple]:
    """Every check's numbers, as the report prints them (timings and paths left out)."""
    return [(c["subject"], c["compared"], c["passed"], c["max_abs"], c["rel_norm"], c["detail"])
            for c in report["checks"]]


@pytest.mark.slow  # two multi-process runs (4 processes each); one step on a 3-layer net
def test_two_identical_multi_process_runs_print_identical_figures(tmp_path):
    """The launcher seeds every worker alike, and nothing else varies between runs: the same command twice
    prints the same numbers (issue 36 said two identical runs differed)."""
    (tmp_path / "unseeded_pairs.py").write_text(UNSEEDED)
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["PYTHONPATH"] = f"{tmp_path}{os.pathsep}{ROOT}"
    seed = str(int(np.random.default_rng().integers(10_000)))
    command = [sys.executable, "-m", "comparisons", "run", "--pair", "unseeded_pairs:pair", "--processes", "2",
               "--devices", "1", "--batch", "4", "--steps", "1", "--seed", seed, "--format", "json"]
    reports = []
    for _ in range(2):
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        reports.append(json.loads(done.stdout))
    assert figures(reports[0]) == figures(reports[1])
    assert any(c["max_abs"] for c in reports[0]["checks"] if c["max_abs"] is not None)  # numbers, not all zeros
