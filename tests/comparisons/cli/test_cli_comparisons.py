"""`python -m comparisons`: demo, list, run (JSON), bad input (import weight: tests/test_import_structure.py)."""
from __future__ import annotations

import json

import pytest
from _helpers_harness import run_cli

from comparisons.verdicts import SCHEMA_VERSION


def test_demo_prints_the_table_and_writes_a_self_contained_report(tmp_path):
    result = run_cli("demo", "--out", str(tmp_path / "report.html"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "cnn_bn: batch 10 on 4 device(s) (chunks 3, 3, 3, 1)" in result.stdout
    assert "checks passed" in result.stdout and "FAIL" not in result.stdout
    html = (tmp_path / "report.html").read_text()
    assert "<th class=group colspan=5>torch</th>" in html and "<th class=group colspan=5>jax:explicit</th>" in html
    # --torch-devices auto: virtual devices on a machine without 4 GPUs, named in the headline and grid
    import torch

    if torch.cuda.device_count() < 4:
        assert "torch on virtual devices vdev:0..3" in html
        assert all(f"vdev:{i}" in html for i in range(4))
    assert "https://" not in html and "<script" not in html


def test_list_names_every_pair_and_strategy():
    result = run_cli("list")
    assert result.returncode == 0
    for name in ("mlp", "cnn_bn", "transformer_block", "strategies: explicit, pmap, sharded, shard_map"):
        assert name in result.stdout


def test_run_json_parses_and_follows_the_schema(tmp_path):
    out = tmp_path / "r.json"
    result = run_cli("run", "--model", "mlp", "--devices", "3", "--batch", "5", "--strategy", "explicit,pmap",
                     "--steps", "1", "--format", "json", "--out", str(out))
    assert result.returncode == 0, result.stderr
    data = json.loads(out.read_text())
    assert data["schema_version"] == SCHEMA_VERSION and data["ok"] is True
    assert data["chunk_sizes"] == [2, 2, 1]
    assert data["strategies"] == ["explicit", "pmap"]
    assert set(data["placements"]) == {"torch", "jax:explicit", "jax:pmap"}
    assert {c["subject"] for c in data["checks"]} >= {"outputs", "gradients", "placement", "aliasing"}


@pytest.mark.parametrize("args, message", [
    (["--model", "resnet"], "unknown model pair 'resnet'"),
    (["--model", "mlp", "--batch", "0"], "batch_size=0; pass a positive integer"),
    (["--model", "mlp", "--strategy", "explicit,vmap"], "strategy='vmap' is not supported"),
    (["--model", "mlp", "--dtype", "float16"], "dtype='float16' is not supported"),
    (["--model", "mlp", "--devices", "2", "--torch-devices", "cuda"], "--torch-devices cuda: there is no CUDA here"),
    (["--model", "mlp", "--devices", "65"], "--devices=65: virtual torch devices go up to 64; pass --devices <= 64"),
])
def test_bad_input_exits_2_with_the_error_and_no_traceback(args, message):
    if "cuda" in args or "65" in args:
        import torch

        if torch.cuda.is_available():
            pytest.skip("this machine has CUDA")
    result = run_cli("run", *args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("devices", ["0", "-2", "-1"])
def test_a_device_count_below_one_names_devices_not_the_torch_kind(devices):
    result = run_cli("run", "--model", "mlp", "--devices", devices, "--steps", "1")
    assert result.returncode == 2, result.stderr
    assert f"--devices={devices}: pass a positive number of devices, e.g. --devices 4" in result.stderr
    assert "--torch-devices" not in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("devices", [0, -2])
def test_torch_kind_auto_never_takes_cuda_for_fewer_than_one_device(monkeypatch, devices):
    import torch

    from comparisons.runs import torch_kind

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    assert torch_kind("auto", devices) == "virtual"


@pytest.mark.slow
def test_run_with_virtual_torch_devices_places_replicas_on_vdev(tmp_path):
    result = run_cli("run", "--model", "cnn_bn", "--devices", "3", "--batch", "7", "--steps", "1",
                     "--torch-devices", "virtual", "--format", "json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    params = [r for r in data["placements"]["torch"] if r["role"] == "param" and r["replica"] is not None]
    assert {(r["replica"], r["device"]) for r in params} == {(i, f"vdev:{i}") for i in range(3)}
    assert data["ok"] is True


@pytest.mark.parametrize("gpus, devices, expected", [(0, 4, "virtual"), (2, 4, "virtual"), (4, 4, "cuda"),
                                                     (8, 2, "cuda")])
def test_auto_torch_devices_takes_cuda_only_when_there_are_enough_gpus(monkeypatch, gpus, devices, expected):
    import torch

    from comparisons.runs import torch_kind

    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    assert torch_kind("auto", devices) == expected
    assert torch_kind("cpu", devices) == "cpu"  # an explicit choice is kept
