"""NNX twins through the multi-process runs (`--processes 2`): the built-in pairs' NNX twins (flax=, --flax) and a
user's NNX pair, 2 torch ranks beside 2 JAX processes x 2 devices, each JAX process training the nnx.Module itself.
The real runs (about 45 s each on a busy 2-core machine) are slow; what picks the twin, and the NNX step against
`nnx.Optimizer` in this process, are not."""
from __future__ import annotations

import dataclasses
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _helpers_distributed import ROOT, no_rank_left_behind  # noqa: F401

from comparisons.distributed import compare_distributed
from comparisons.distributed.compare import _config, _pair_name
from comparisons.distributed.config import WorkerConfig
from comparisons.distributed.pairs import load
from comparisons.errors import ComparisonError
from comparisons.harness import Settings
from comparisons.models import builtin
from comparisons.models import pair as registry
from comparisons.models.jax_linen import LINEN
from comparisons.models.jax_nnx import NNX
from comparisons.models.user_pairs import load_pair

HELPERS = Path(__file__).resolve().parents[1] / "models"  # _nnx_twins.py: the NNX twins of the NNX tests
SEED = random.Random().randrange(1000)
NNX_MODULE_TRAINED = "the NNX module itself, in place"  # the workers' own words for the NNX step (the notes)


def _settings(flax: str | None) -> Settings:
    return Settings(batch_size=8, devices=2, steps=2, strategies=("explicit",), precision="off", flax=flax,
                    caller="compare_distributed")


@pytest.mark.parametrize("flax, api, side", [(None, "nnx", NNX), ("nnx", "nnx", NNX), ("linen", "linen", LINEN)])
def test_the_workers_get_the_builtin_twin_of_the_api_asked(flax, api, side):
    name = random.choice([pair.name for pair in builtin.BUILTIN])
    config = _config(name, (), ("torch", "jax"), 5.0, 2, _settings(flax))
    assert config.flax == api and WorkerConfig.from_json(config.to_json()) == config
    loaded = load(name, config.sources, SEED, config.flax)
    assert loaded.name == name and loaded.jax_side is side


def test_a_builtin_twin_object_goes_by_name_and_a_users_pair_keeps_its_own_api():
    twin = random.choice(builtin.BUILTIN_NNX + builtin.BUILTIN)
    assert _pair_name(twin) == twin.name  # before: "a different pair of that name is registered already"
    mine = dataclasses.replace(builtin.MLP, name=f"my_linen_{SEED}")
    registry.register(mine)
    try:
        assert _config(mine.name, ("somewhere",), ("jax",), 5.0, 2, _settings(None)).flax == "linen"
        with pytest.raises(ComparisonError, match=r"compare_distributed: flax='nnx' does not apply to pair "
                                                  rf"'my_linen_{SEED}': its JAX side is a Flax linen model"):
            _config(mine.name, ("somewhere",), ("jax",), 5.0, 2, _settings("nnx"))
    finally:
        registry._REGISTRY.pop(mine.name, None)


def test_the_nnx_step_trains_as_nnx_optimizer_does_on_one_device():
    """multihost_nnx.train on this process's 8 devices (one process: the global mesh is local) against the module
    stepped by hand with nnx.Optimizer(model, tx, wrt=nnx.Param) on one device: mlp has no BatchNorm, so the loss
    on the gathered output is the whole batch's."""
    import jax
    from flax import nnx

    from comparisons.distributed import multihost_nnx
    from comparisons.runs import optax_optimizer

    config = WorkerConfig("mlp", 16, 2, optimizer=random.choice(["sgd", "momentum", "adam"]), seed=SEED, flax="nnx")
    pair, built = builtin.BUILTIN_NNX[0].build_declared(seed=SEED)
    (x,), y = data = pair.make_inputs(config.batch_size, SEED, np.float32)
    result = multihost_nnx.train(config, 0, pair, built.flax.module_with(built.variables), data)

    model = built.flax.module_with(built.variables)
    optimizer = nnx.Optimizer(model, optax_optimizer(config.optimizer), wrt=nnx.Param)
    output = model(x)
    losses = []
    for _ in range(config.steps):
        loss, grads = nnx.value_and_grad(lambda m: pair.loss_jax(m(x), y))(model)
        optimizer.update(model, grads)
        losses.append(loss)
    after = nnx.to_pure_dict(nnx.state(model, nnx.Param))
    np.testing.assert_allclose(result["output"], output, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(result["loss"], losses[0], rtol=1e-5)
    for path, leaf in jax.tree_util.tree_leaves_with_path(after):
        keys = [str(k.key) for k in path]
        np.testing.assert_allclose(_at(result["params"], keys), leaf, rtol=1e-5, atol=1e-6, err_msg=".".join(keys))
    assert result["trained"].startswith(NNX_MODULE_TRAINED) and result["stats_first"] == {}


def test_what_torch_freezes_stays_and_is_found_under_nnxs_spelling():
    from flax import nnx

    from comparisons.distributed import multihost_nnx

    class Lstm(nnx.Module):  # nnx.LSTMCell's `if_` is the Flax path's `if`
        def __init__(self, rngs: nnx.Rngs):
            self.lstm = nnx.RNN(nnx.LSTMCell(3, 4, rngs=rngs))
            self.out = nnx.Linear(4, 2, rngs=rngs)

    lstm = Lstm(nnx.Rngs(random.randrange(100)))
    assert multihost_nnx.frozen_as_keyed(lstm, ("lstm.cell.if.kernel", "out.bias", "nowhere.kernel")) == (
        "lstm.cell.if_.kernel", "out.bias")
    frozen = random.choice(["fc1.kernel", "fc2.bias", "out.kernel"])
    config = WorkerConfig("mlp", 8, 2, optimizer=random.choice(["sgd", "adam"]), seed=SEED, flax="nnx")
    pair, built = builtin.BUILTIN_NNX[0].build_declared(seed=SEED)
    data = pair.make_inputs(config.batch_size, SEED, np.float32)
    result = multihost_nnx.train(config, 0, dataclasses.replace(pair, frozen=(frozen,)),
                                 built.flax.module_with(built.variables), data)
    for path in ("fc1.kernel", "fc2.bias", "out.kernel"):
        before, after = _at(built.variables["params"], path.split(".")), _at(result["params"], path.split("."))
        assert np.array_equal(before, after) == (path == frozen), path


def _at(tree: dict, keys: list[str]):
    for key in keys:
        tree = tree[key]
    return tree


@pytest.mark.slow
def test_the_builtin_nnx_cnn_bn_agrees_with_ddp_and_its_one_process_twin():
    report = compare_distributed(builtin.BUILTIN_NNX[1], processes=2, devices=2, batch_size=8, steps=2, seed=SEED,
                                 timeout=300, rendezvous_timeout=60)
    assert report.ok, report.render("markdown")
    assert report.model == "cnn_bn" and report.flax == "nnx"
    assert any(NNX_MODULE_TRAINED in note for note in report.notes)
    passed = {(c.subject, c.compared) for c in report.checks if c.passed}
    assert {("batch_stats", "JAX multi-process vs dp_jax DataParallel x4"),  # the one-process NNX twin
            ("params_after_steps", "JAX multi-process vs dp_jax DataParallel x4"),
            ("gradients", "torch DataParallel x4 vs JAX multi-process"),
            ("gradients", "torch DDP x2 vs DataParallel x2"),
            ("gradients (by design)", "torch DDP vs JAX multi-process")} <= passed


@pytest.mark.slow
def test_run_processes_runs_the_nnx_mlp_from_the_command_line():
    environment = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    environment["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-m", "comparisons", "run", "--processes", "2", "--devices", "2",
                           "--model", "mlp", "--flax", "nnx", "--batch", "8", "--steps", "2", "--seed", str(SEED),
                           "--format", "json"], cwd=ROOT, env=environment, capture_output=True, text=True,
                          timeout=400)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] and report["model"] == "mlp" and report["flax"] == "nnx"
    assert any(NNX_MODULE_TRAINED in note for note in report["notes"])
    passed = {(c["subject"], c["compared"]) for c in report["checks"] if c["passed"]}
    assert {("gradients", "torch DDP vs JAX multi-process"),
            ("params_after_steps", "JAX multi-process vs dp_jax DataParallel x4"),
            ("params_after_steps", "JAX multi-process process 1 vs process 0")} <= passed


@pytest.mark.slow
def test_a_users_nnx_twin_runs_in_every_process_and_agrees(tmp_path, monkeypatch):
    (tmp_path / "nnx_distributed_user.py").write_text(
        f"import sys\nsys.path.insert(0, {str(HELPERS)!r})\nfrom _nnx_twins import mlp_pair\nPAIR = mlp_pair()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        pair = load_pair("nnx_distributed_user:PAIR")
        assert repr(pair.jax_side) == "NNX"
        report = compare_distributed(pair, processes=2, devices=2, batch_size=8, steps=2, seed=SEED,
                                     imports=("nnx_distributed_user:PAIR",), timeout=300)
    finally:
        sys.modules.pop("nnx_distributed_user", None)
        registry._REGISTRY.pop("mlp_nnx", None)
    assert report.ok, report.render("markdown")
    assert report.flax == "nnx" and any(NNX_MODULE_TRAINED in note for note in report.notes)
    jax_vs_torch = [c for c in report.checks if c.compared == "torch DataParallel x4 vs JAX multi-process"]
    assert {c.subject for c in jax_vs_torch} >= {"outputs", "gradients", "params_after_steps"}
