"""No flag is dropped silently (issue 36): flags a mode would ignore are refused by name, --processes is
bounded, --out refuses what it could not write a report to, and --input-shape reads alike in doctor and run."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from comparisons import ComparisonError, harness
from comparisons.cli import main
from comparisons.distributed import compare_distributed


def refused(capsys, *argv: str) -> str:
    assert main(list(argv)) == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("flags, named", [
    (("--rtol", "1e-9"), "--rtol"), (("--rtol", "-1"), "--rtol"), (("--atol", "0"), "--atol"),
    (("--precision", "float64"), "--precision"), (("--padding",), "--padding"),
    (("--atol", "1e-3", "--padding"), "--atol, --padding"),
])
def test_processes_refuses_the_flags_it_would_drop_by_name(capsys, monkeypatch, flags, named):
    from comparisons.distributed import compare

    monkeypatch.setattr(compare, "Launch", lambda *a, **k: pytest.fail("workers started"))
    err = refused(capsys, "run", "--model", "mlp", "--processes", "2", "--devices", "2", *flags)
    assert f"run --processes: {named} do" in err and "drop --processes" in err


@given(extra=st.integers(1, 10**6))
def test_processes_past_the_cores_are_refused_with_the_limit(extra):
    limit = max(4, 2 * (os.cpu_count() or 1))
    with pytest.raises(ComparisonError, match=f"processes={limit + extra} would start 2 x {limit + extra} worker "
                                              f"processes .* pass at most {limit}"):
        compare_distributed("mlp", processes=limit + extra, devices=1)


@pytest.mark.parametrize("flags, named", [
    (("--input-shape", "3"), "--input-shape"), (("--int-inputs", "5"), "--int-inputs"),
    (("--loss", "math:fsum"), "--loss"), (("--int-inputs", "5", "--input-shape", "3"), "--input-shape, --int-inputs"),
])
def test_flags_only_torch_reads_are_refused_without_torch(capsys, monkeypatch, flags, named):
    monkeypatch.setattr(harness, "compare_settings", lambda *a: pytest.fail("the comparison ran"))
    err = refused(capsys, "run", "--model", "mlp", *flags)
    assert f"run: {named} only describe" in err and "pass --torch TARGET" in err


@given(dims=st.lists(st.integers(1, 9), min_size=1, max_size=3), batch=st.integers(1, 20))
def test_input_shape_takes_B_for_the_batch_in_doctor_and_run_torch_alike(dims, batch):
    from comparisons.doctor import cli as doctor_cli
    from comparisons.traced import cli as traced_cli

    text = ",".join(map(str, dims))
    assert traced_cli._shape(f"B,{text}") == traced_cli._shape(text) == tuple(dims)
    assert doctor_cli._shape(f"B,{text}", batch) == (batch, *dims)
    assert doctor_cli._shape(f"{batch},{text}", 99) == (batch, *dims)


@pytest.mark.parametrize("batch", ["0", "-3"])
def test_doctor_refuses_a_batch_below_one(capsys, batch):
    err = refused(capsys, "doctor", "torch.nn:Identity", "--input-shape", "B,3", "--batch", batch)
    assert f"--batch {batch}: pass a positive number of rows" in err


def test_out_refuses_an_empty_path_and_a_trailing_slash_naming_the_flag(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(harness, "compare_settings", lambda *a: pytest.fail("the comparison ran"))
    assert "--out '': an empty path; pass a file path" in refused(capsys, "run", "--model", "mlp", "--out", "")
    folder = f"{tmp_path / 'newdir'}/"
    err = refused(capsys, "run", "--model", "mlp", "--out", folder)
    assert f"--out {folder}: names a folder (it ends in a slash)" in err and not Path(folder).exists()
    assert "--out '': an empty path" in refused(capsys, "doctor", "torch.nn:Identity", "--input-shape", "2,3",
                                                   "--out", "")
