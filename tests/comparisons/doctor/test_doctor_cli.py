"""`python -m comparisons doctor`: targets by file or module, inputs, formats and exit codes.

A doctor run installs virtual devices, which is process-global, so runs go through a subprocess;
usage errors, found before anything runs, are checked in-process.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from comparisons.doctor.cli import main

ROOT = Path(__file__).resolve().parents[3]
COMMAND = ["comparisons", "doctor"]

BROKEN = textwrap.dedent("""\
    import torch
    from torch import nn


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 2)
            self.steps = [nn.Linear(2, 2)]

        def forward(self, x, shift=0.0):
            return self.steps[0](self.fc(x)) + shift


    class Fixed(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 2)
            self.steps = nn.ModuleList([nn.Linear(2, 2)])

        def forward(self, x, shift=0.0):
            return self.steps[0](self.fc(x)) + shift


    def make_inputs(batch_size):
        return (torch.randn(batch_size, 3),), {"shift": 1.0}
    """)


def doctor(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{cwd}"}
    return subprocess.run([sys.executable, "-m", *COMMAND, *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=300)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "mynet.py").write_text(BROKEN)
    return tmp_path


def test_file_target_with_findings_exits_1_and_json_names_the_path(project):
    done = doctor("mynet.py:Net", "--input-shape", "8,3", "--format", "json", cwd=project)
    assert done.returncode == 1, done.stderr
    data = json.loads(done.stdout)
    [finding] = data["findings"]
    assert (finding["kind"], finding["where"], finding["replicas"]) == ("unreplicated-module", "steps[0]",
                                                                         [0, 1, 2, 3])
    assert finding["source"] == "mynet.py:12" and data["backend"] == "torch"


def test_module_target_with_inputs_function_kwargs_and_backward_exits_0(project):
    done = doctor("mynet:Fixed", "--inputs", "mynet:make_inputs", "--devices", "3", "--backward", cwd=project)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "nothing found" in done.stdout and "vdev:2" in done.stdout and "vdev:3" not in done.stdout


def test_html_out_writes_a_page(project):
    done = doctor("mynet.py:Net", "--input-shape", "8,3", "--format", "html", "--out", "doctor.html",
                  cwd=project)
    page = (project / "doctor.html").read_text()
    assert done.returncode == 1 and "unreplicated-module" in page and page.startswith("<!DOCTYPE html>")


@pytest.mark.parametrize("args, message", [
    (["mynet.py", "--input-shape", "8,3"], "expected package.module:name"),
    (["mynet.py:Nope", "--input-shape", "8,3"], "has no attribute 'Nope'"),
    (["missing.py:Net", "--input-shape", "8,3"], "no file 'missing.py'"),
    (["not_a_module_xyz:Net", "--input-shape", "8,3"], "cannot import 'not_a_module_xyz'"),
    (["mynet.py:Net"], "--input-shape SHAPE"),
    (["mynet.py:Net", "--input-shape", "8,3", "--inputs", "mynet:make_inputs"], "exactly one"),
    (["mynet.py:Net", "--input-shape", "8,3", "--devices", "1"], "at least 2 devices"),
    (["mynet.py:make_inputs", "--input-shape", "8,3"], "calling mynet.py:make_inputs() raised TypeError"),
    (["mynet.py:Net", "--input-shape", "8,x"], "shapes look like 8,3"),
])
def test_bad_usage_exits_2_and_says_what_to_pass(project, monkeypatch, capsys, args, message):
    monkeypatch.chdir(project)
    monkeypatch.setattr(sys, "path", list(sys.path) + [str(project)])
    assert main(args) == 2
    assert message in capsys.readouterr().err


MARKED = textwrap.dedent("""\
    from pathlib import Path

    from torch import nn


    def make():
        Path("factory-ran").write_text("the doctor did work before refusing --out")
        return nn.Linear(3, 2)
    """)


@pytest.mark.parametrize("out", ["no-such-folder/report.html", "a-folder"])
def test_an_unwritable_out_is_refused_before_any_work(tmp_path, out):
    (tmp_path / "marked.py").write_text(MARKED)
    (tmp_path / "a-folder").mkdir()
    done = doctor("marked.py:make", "--input-shape", "8,3", "--out", out, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"--out {out}" in done.stderr and done.stdout == ""
    assert not (tmp_path / "factory-ran").exists()  # refused before the model was even made


@pytest.mark.parametrize("shape", ["-1,3", "8,-3", "0,3"])
def test_a_shape_with_a_dim_below_1_names_the_flag_the_value_and_the_fix(project, monkeypatch, capsys, shape):
    monkeypatch.chdir(project)
    assert main(["mynet.py:Net", "--input-shape", shape]) == 2
    error = capsys.readouterr().err
    assert f"--input-shape {shape}" in error and "positive" in error and "expected one argument" not in error


def test_a_negative_looking_shape_reaches_the_same_check_through_the_top_level_command(project):
    done = doctor("mynet.py:Net", "--input-shape", "-2,3", cwd=project)
    assert done.returncode == 2 and "--input-shape -2,3" in done.stderr and "positive" in done.stderr


def test_factory_returning_something_else_is_bad_usage(project, monkeypatch, capsys):
    (project / "other.py").write_text("def make():\n    return 42\n")
    monkeypatch.chdir(project)
    assert main(["other.py:make", "--input-shape", "8,3"]) == 2
    assert "returned a int; return a torch nn.Module" in capsys.readouterr().err


FLAX = textwrap.dedent("""\
    import flax.linen as nn
    import jax
    import numpy as np

    OFFSET = None


    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(2)(x) + OFFSET


    def make():
        global OFFSET
        OFFSET = jax.device_put(np.ones(2, np.float32), jax.devices()[0])
        return Net()
    """)


def test_flax_target_runs_the_jax_doctor(tmp_path):
    (tmp_path / "flaxnet.py").write_text(FLAX)
    done = doctor("flaxnet.py:make", "--input-shape", "8,3", "--format", "json", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    data = json.loads(done.stdout)
    assert data["backend"] == "jax" and data["devices"] == ["cpu:0", "cpu:1", "cpu:2", "cpu:3"]
    [finding] = data["findings"]
    assert (finding["kind"], finding["where"], finding["source"]) == ("closed-over-array", "OFFSET",
                                                                      "flaxnet.py:11")


NNX = textwrap.dedent("""\
    import jax
    import numpy as np
    from flax import nnx

    OFFSET = jax.device_put(np.ones(2, np.float32), jax.devices()[1])


    class Block(nnx.Module):
        def __init__(self, rngs):
            self.norm = nnx.LayerNorm(3, rngs=rngs)


    class Net(nnx.Module):
        def __init__(self, rngs):
            self.blocks = nnx.List([Block(rngs)])
            self.fc = nnx.Linear(3, 2, rngs=rngs)

        def __call__(self, x):
            return self.fc(self.blocks[0].norm(x)) + OFFSET


    model = Net(nnx.Rngs(0))


    def make_state():
        return nnx.state(model)
    """)


def test_an_nnx_module_target_runs_the_jax_doctor_and_names_paths_and_lines(tmp_path):
    """Before: exit 2, "calling nnxnet.py:model() raised TypeError" (the module was called as a factory)."""
    (tmp_path / "nnxnet.py").write_text(NNX)
    done = doctor("nnxnet.py:model", "--input-shape", "B,3", "--devices", "4", "--format", "json", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    data = json.loads(done.stdout)
    assert data["backend"] == "jax" and data["target"] == "nnxnet.py:model" and len(data["devices"]) == 4
    found = {(f["kind"], f["where"], f["source"]) for f in data["findings"]}
    line = {text.strip(): f"nnxnet.py:{n}" for n, text in enumerate(NNX.splitlines(), 1)}
    assert found == {("closed-over-array", "OFFSET", line["return self.fc(self.blocks[0].norm(x)) + OFFSET"]),
                     ("nnx-default", "blocks[0].norm", line["self.norm = nnx.LayerNorm(3, rngs=rngs)"])}


@pytest.mark.parametrize(("target", "words"), [("Net", "NNX Module class Net"), ("make_state", "NNX State alone")])
def test_an_nnx_class_or_state_target_is_refused_in_one_line(tmp_path, monkeypatch, capsys, target, words):
    (tmp_path / "nnxnet.py").write_text(NNX)
    monkeypatch.chdir(tmp_path)
    assert main([f"nnxnet.py:{target}", "--input-shape", "8,3"]) == 2
    [error] = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert words in error and ("pass nnxnet.py:" in error or "pass the module itself" in error), error
