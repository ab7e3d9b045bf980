"""Multi-process runs of pairs from user code: the workers import the same targets the parent did.

Two real runs (a few 10 s each on a busy 2-core machine): the CLI with --pair on 2 processes x 2
devices, and compare_distributed with imports= on an uneven batch (torch side). The rest is fast.
"""
from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _helpers_distributed import ROOT, no_rank_left_behind  # noqa: F401

from comparisons import ComparisonError, models
from comparisons.distributed import compare_distributed
from comparisons.distributed.pairs import pair_sources, python_path
from comparisons.errors import UsageError

FIXTURE = Path(__file__).resolve().parents[1] / "user_pairs_fixture"  # shared with cli/
SEED = random.Random().randrange(1000)


@pytest.fixture
def user_folder(tmp_path, monkeypatch) -> Path:
    """The user's pair modules in a folder on this process's sys.path only (not on PYTHONPATH); modules of
    the same names an earlier test imported from its own folder are forgotten first, and again after."""
    folder = tmp_path / "user_code"
    shutil.copytree(FIXTURE, folder)
    _forget_modules()
    monkeypatch.syspath_prepend(str(folder))
    yield folder
    _forget_modules()


def _forget_modules() -> None:
    for name in ("tiny_pairs", "tiny_registering"):
        sys.modules.pop(name, None)
    _forget("tiny_tanh", "tiny_imported")  # what importing or loading them registered


def _forget(*names: str) -> None:
    from comparisons.models import pair as registry

    for name in names:
        registry._REGISTRY.pop(name, None)


def test_a_built_in_pair_needs_no_import_and_a_user_pair_is_found_where_it_lives(user_folder):
    import tiny_pairs

    assert pair_sources("cnn_bn", ()) == ()
    models.register(tiny_pairs.TINY)
    assert pair_sources("tiny_tanh", ()) == ("tiny_pairs:TINY",)
    assert pair_sources("tiny_tanh", ("tiny_registering",)) == ("tiny_registering",)  # the user's targets win
    assert python_path(["tiny_pairs:TINY"]) == [str(user_folder.resolve())]


def test_the_main_script_and_its_multiprocessing_alias_are_never_the_import_target(user_folder, monkeypatch):
    import tiny_pairs

    main = sys.modules["__main__"]
    monkeypatch.setattr(main, "TINY_FROM_MAIN", tiny_pairs.TINY, raising=False)  # `from tiny_pairs import TINY`
    monkeypatch.setitem(sys.modules, "__mp_main__", main)
    monkeypatch.setitem(sys.modules, "aaa_script_alias", main)  # any other name of the main module
    monkeypatch.delitem(sys.modules, "tiny_pairs")
    monkeypatch.setitem(sys.modules, "tiny_pairs", tiny_pairs)  # now after the aliases: the scan meets them first
    models.register(tiny_pairs.TINY)
    assert pair_sources("tiny_tanh", ()) == ("tiny_pairs:TINY",)


def test_a_pair_defined_in_main_is_refused_before_any_process_starts(user_folder):
    import tiny_pairs

    scripted = dataclasses.replace(tiny_pairs.TINY, name=f"scripted_{SEED}")  # held by no module: as in a script
    try:
        with pytest.raises(UsageError, match=r"no importable module holds it .* imports=\('module',\)"):
            compare_distributed(scripted, processes=2, devices=2)
    finally:
        _forget(scripted.name)


def test_a_different_pair_under_a_registered_name_is_refused():
    impostor = dataclasses.replace(models.get("mlp"), description="not the built-in one")
    with pytest.raises(ComparisonError, match="a different pair of that name is registered already"):
        compare_distributed(impostor)


def test_the_workers_load_the_pair_by_its_import_target_in_a_fresh_process(user_folder):
    code = ("from comparisons.distributed.pairs import load; "
            "print(load('tiny_imported', ['tiny_registering'], seed=0).description)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*python_path(["tiny_registering"]), str(ROOT)])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd="/",
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "registered on import"


def test_run_processes_takes_a_pair_object_from_a_users_module(user_folder):
    environment = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    environment["PYTHONPATH"] = f"{user_folder}{os.pathsep}{ROOT}"
    done = subprocess.run([sys.executable, "-m", "comparisons", "run", "--processes", "2", "--devices", "2",
                           "--pair", "tiny_pairs:TINY", "--batch", "8", "--steps", "1", "--seed", str(SEED),
                           "--format", "json"], cwd=ROOT, env=environment, capture_output=True, text=True,
                          timeout=400)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] and report["model"] == "tiny_tanh" and report["chunk_sizes"] == [2, 2, 2, 2]
    compared = {c["compared"] for c in report["checks"]}
    assert {"torch DDP x2 vs DataParallel x2", "JAX multi-process vs dp_jax DataParallel x4"} <= compared


def test_compare_distributed_imports_a_registering_module_for_an_uneven_batch(user_folder):
    # the folder is on this process's sys.path only: the workers get it through PYTHONPATH from python_path
    import tiny_registering  # noqa: F401  (registers tiny_imported)

    report = compare_distributed("tiny_imported", processes=2, batch_size=7, steps=2, seed=SEED,
                                 sides=("torch",), imports=("tiny_registering",))
    assert report.ok and report.chunk_sizes == [4, 3]
    assert any(c.compared == "torch DDP x2 vs DataParallel x2 on DDP's objective" for c in report.checks)
    with pytest.raises(ComparisonError, match=r"batch_size=7 does not split into 2 x 2 equal shards"):
        compare_distributed("tiny_imported", processes=2, devices=2, batch_size=7, imports=("tiny_registering",))


def test_the_workers_import_this_processes_comparisons_whatever_their_folder(monkeypatch):
    from comparisons.distributed.compare import _worker_path
    from comparisons.distributed.config import WorkerConfig

    monkeypatch.setenv("PYTHONPATH", "/somewhere/else")
    folders = _worker_path(WorkerConfig("mlp", 4, 1)).split(os.pathsep)
    assert folders == [str(Path(__import__("comparisons").__file__).resolve().parents[1]), "/somewhere/else"]
