"""`--flax {nnx,linen}` on run and demo, and the Flax API column of `list`. Each CLI run here is in-process, with
the comparison itself replaced (`harness.compare_settings`): what reaches it is what these tests read."""
from __future__ import annotations

import dataclasses
import random
import re
from pathlib import Path

import pytest
from _helpers_harness import small_report

from comparisons import cli, harness, runs
from comparisons.models import builtin
from comparisons.models.jax_linen import LINEN
from comparisons.models.jax_nnx import NNX
from comparisons.models.pair import _REGISTRY

FIXTURE = Path(__file__).resolve().parents[1] / "user_pairs_fixture"


@pytest.fixture
def comparison(monkeypatch) -> list:
    """compare_settings replaced: each call's (pair, settings) is recorded, and a passing report returned; the demo's
    torch devices ('auto') are not installed (vdev would be, for the whole test process)."""
    calls = []
    monkeypatch.setattr(runs, "install_virtual", lambda *args, **kwargs: None)
    monkeypatch.setattr(harness, "compare_settings", lambda pair, made: calls.append((pair, made)) or small_report())
    return calls


@pytest.mark.parametrize("flags, side", [([], NNX), (["--flax", "nnx"], NNX), (["--flax", "linen"], LINEN)])
def test_demo_and_run_compare_the_builtin_twin_in_the_api_asked(comparison, tmp_path, flags, side):
    assert cli.main(["demo", "--out", str(tmp_path / "r.html"), *flags]) == 0
    assert cli.main(["run", "--model", "transformer_block", "--torch-devices", "cpu", "--format", "json",
                     "--out", str(tmp_path / "r.json"), *flags]) == 0
    (demo_pair, demo_settings), (run_pair, run_settings) = comparison
    assert (demo_pair.name, run_pair.name) == ("cnn_bn", "transformer_block")
    assert demo_pair.jax_side is side and run_pair.jax_side is side
    assert demo_settings.flax == run_settings.flax == (flags[1] if flags else None)


def test_run_refuses_the_other_api_for_a_pair_of_ones_own_before_comparing(comparison, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(FIXTURE))
    assert cli.main(["run", "--pair", "tiny_pairs:TINY", "--flax", "nnx", "--torch-devices", "cpu"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: run: --flax nnx does not apply to pair 'tiny_tanh': its JAX side is a Flax linen model, and only the "
        "built-in pairs come in both Flax APIs; pass --flax linen or drop --flax")
    assert cli.main(["run", "--pair", "tiny_pairs:TINY", "--flax", "linen", "--torch-devices", "cpu"]) == 0
    assert [pair.name for pair, _ in comparison] == ["tiny_tanh"]


def test_run_refuses_an_unknown_api_by_flag(comparison, capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["run", "--model", "mlp", "--flax", "haiku"])
    assert exited.value.code == 2 and "--flax: invalid choice: 'haiku' (choose from 'nnx', 'linen')" in \
        capsys.readouterr().err
    assert comparison == []


@pytest.fixture
def distributed(monkeypatch) -> list:
    """compare_distributed replaced: each call's (pair, keywords) is recorded, and a passing report returned."""
    from comparisons.distributed import compare

    calls = []
    monkeypatch.setattr(compare, "compare_distributed",
                        lambda pair, **kwargs: calls.append((pair, kwargs)) or small_report())
    return calls


@pytest.mark.parametrize("flags, api", [([], None), (["--flax", "nnx"], "nnx"), (["--flax", "linen"], "linen")])
def test_run_processes_hands_the_flax_api_to_the_multi_process_comparison(distributed, comparison, flags, api):
    model = random.choice([pair.name for pair in builtin.BUILTIN])
    assert cli.main(["run", "--model", model, "--processes", "2", "--format", "json", *flags]) == 0
    assert [(pair, kwargs["flax"], kwargs["processes"]) for pair, kwargs in distributed] == [(model, api, 2)]
    assert comparison == []  # not the one-process comparison


def test_run_processes_refuses_the_other_api_for_a_pair_of_ones_own(distributed, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(FIXTURE))
    assert cli.main(["run", "--pair", "tiny_pairs:TINY", "--processes", "2", "--flax", "nnx"]) == 2
    assert "error: run: --flax nnx does not apply to pair 'tiny_tanh'" in capsys.readouterr().err
    assert distributed == []


def test_list_shows_each_pairs_flax_apis(monkeypatch, capsys):
    mine = {"my_linen": dataclasses.replace(builtin.MLP, name="my_linen"),
            "my_nnx": dataclasses.replace(builtin.BUILTIN_NNX[0], name="my_nnx")}
    for name, pair in mine.items():
        monkeypatch.setitem(_REGISTRY, name, pair)
    assert cli.main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert re.split(r"\s+", lines[0]) == ["pair", "flax", "description"]
    column = {m[1]: m[2] for line in lines[1:] if (m := re.match(r"(\S+)\s+(nnx, linen|nnx|linen|-)\s", line))}
    expected = {**{pair.name: "nnx, linen" for pair in builtin.BUILTIN}, "my_linen": "linen", "my_nnx": "nnx"}
    assert expected.items() <= column.items()
    assert len(column) == len(lines) - 2  # every pair's row has the column (the last line lists the strategies)
