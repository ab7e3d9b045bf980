"""The CLI runs pairs from user code (--pair, --import, the dp_compare.pairs entry points); Ctrl-C ends it cleanly."""
from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import pytest
from _helpers_harness import ROOT
from _helpers_signals import interruptible

from comparisons import ComparisonError, harness
from comparisons.convert import ConversionError

FIXTURE = Path(__file__).resolve().parents[1] / "user_pairs_fixture"  # shared with distributed/


@pytest.fixture
def user_folder(tmp_path) -> Path:
    """A folder outside the repository holding the user's pair modules."""
    folder = tmp_path / "user_code"
    shutil.copytree(FIXTURE, folder)
    return folder


def run_cli(*args: str, pythonpath: Path, timeout: float = 300, **env) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    environment.update(PYTHONPATH=f"{pythonpath}{os.pathsep}{ROOT}", **env)
    return subprocess.run([sys.executable, "-m", "comparisons", *args], cwd=ROOT, env=environment,
                          capture_output=True, text=True, timeout=timeout)


def test_run_takes_a_pair_object_from_a_module_outside_the_package(user_folder, tmp_path):
    out = tmp_path / "tiny.html"
    result = run_cli("run", "--pair", "tiny_pairs:TINY", "--devices", "2", "--batch", "5", "--steps", "1",
                     "--strategy", "explicit", "--format", "html", "--out", str(out), pythonpath=user_folder)
    assert result.returncode == 0, result.stderr
    assert "<h1>dp-compare: tiny_tanh — <span class=ok>OK</span></h1>" in out.read_text()
    # --format html still says the verdicts on the terminal
    assert "tiny_tanh: batch 5 on 2 device(s) (chunks 3, 2)" in result.stdout
    assert result.stdout.strip().splitlines()[-1].startswith("OK: ") and "checks passed" in result.stdout


def test_import_registers_the_pairs_a_module_defines_on_import(user_folder):
    result = run_cli("list", "--import", "tiny_registering", pythonpath=user_folder)
    assert result.returncode == 0, result.stderr
    assert "tiny_imported" in result.stdout and "registered on import" in result.stdout
    assert "tiny_imported" not in run_cli("list", pythonpath=user_folder).stdout


def install_fake_distribution(folder: Path, name: str, entry_point: str) -> None:
    """A dist-info folder on the path: an installed package whose one dp_compare.pairs entry is `entry_point`."""
    dist_info = folder / f"{name.replace('-', '_')}-0.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (dist_info / "entry_points.txt").write_text(f"[dp_compare.pairs]\n{entry_point}\n")


def test_an_installed_package_offers_pairs_through_the_entry_point_group(user_folder):
    install_fake_distribution(user_folder, "tiny-dist", "tiny = tiny_pairs:TINY")
    result = run_cli("list", pythonpath=user_folder)
    assert result.returncode == 0, result.stderr
    assert "tiny_tanh" in result.stdout and "Linear(6, 3)-tanh" in result.stdout


def test_a_broken_entry_point_is_named_without_a_traceback(user_folder):
    install_fake_distribution(user_folder, "broken-dist", "broken = tiny_pairs:MISSING")
    result = run_cli("list", pythonpath=user_folder)
    assert result.returncode == 2
    assert "entry point 'broken' (tiny_pairs:MISSING) in group 'dp_compare.pairs'" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("spec, message", [
    ("tiny_pairs", "--pair 'tiny_pairs': expected module:NAME"),
    ("no_such_module:X", "--pair no_such_module:X: cannot import no_such_module"),
    ("tiny_pairs:NOPE", "module tiny_pairs has no attribute 'NOPE'"),
    ("tiny_pairs:make_inputs", "--pair tiny_pairs:make_inputs is a function, not a comparisons.models.ModelPair"),
])
def test_a_bad_pair_spec_names_the_flag_value_and_fix(user_folder, monkeypatch, spec, message):
    from comparisons.models import user_pairs

    monkeypatch.syspath_prepend(str(user_folder))
    with pytest.raises(user_pairs.UserPairError) as raised:
        user_pairs.load_pair(spec)
    assert message in str(raised.value)


BROKEN_MODULES = {  # name: (source, the line named, what the message says happened)
    "missing_paren": ("import math\nx = (\n", 2, "SyntaxError"),
    "bad_indent": ("def f():\n    return 1\n      y = 2\n", 3, "IndentationError"),
    "divides_by_zero": ("A = 1\nB = 2\nC = A / 0\n", 3, "ZeroDivisionError: division by zero"),
    "raises_in_a_function": ("def check():\n    raise RuntimeError('no GPU here')\n\ncheck()\n", 2,
                             "RuntimeError: no GPU here"),
}


@pytest.mark.parametrize("name", sorted(BROKEN_MODULES))
@pytest.mark.parametrize("flag", ["--import", "--pair"])
def test_a_module_that_fails_at_import_is_named_with_its_file_and_line(tmp_path, monkeypatch, name, flag):
    from comparisons.models import user_pairs

    source, line, what = BROKEN_MODULES[name]
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(user_pairs.UserPairError) as raised:
        user_pairs.import_module(name) if flag == "--import" else user_pairs.load_pair(f"{name}:PAIR")
    message = str(raised.value)
    given = f"--import {name}" if flag == "--import" else f"--pair {name}:PAIR"
    assert message.startswith(f"{given}: importing {name} failed: {what}")
    assert f"{tmp_path / name}.py, line {line}" in message and "fix the module" in message


@pytest.mark.parametrize("command", [["list", "--import", "divides_by_zero"],
                                     ["run", "--pair", "missing_paren:PAIR"]])
def test_the_cli_exits_2_without_a_traceback_for_a_module_that_fails_at_import(tmp_path, command):
    for name in ("divides_by_zero", "missing_paren"):
        (tmp_path / f"{name}.py").write_text(BROKEN_MODULES[name][0])
    result = run_cli(*command, pythonpath=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and f"{tmp_path / command[-1].split(':')[0]}.py, line" in result.stderr


@pytest.mark.parametrize("pair", ["SLOW", "BUSY"])  # sleeping; collecting JAX garbage
def test_ctrl_c_during_a_comparison_exits_130_with_one_line_and_no_file(user_folder, tmp_path, pair):
    marker, out = tmp_path / "started", tmp_path / "report.json"
    environment = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    environment.update(PYTHONPATH=f"{user_folder}{os.pathsep}{ROOT}", TINY_PAIRS_MARKER=str(marker))
    command = [sys.executable, "-m", "comparisons", "run", "--pair", f"tiny_pairs:{pair}",
               "--devices", "2", "--batch", "4", "--format", "json", "--out", str(out)]
    process = subprocess.Popen(interruptible(command), cwd=ROOT, env=environment, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert marker.exists(), f"the comparison never started: {process.poll()}"
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, stderr
    assert stderr.strip() == "interrupted (Ctrl-C): no report written"
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["started", "user_code"]


def test_format_html_on_stdout_puts_the_verdict_summary_on_stderr(capsys):
    from _helpers_harness import small_report

    from comparisons.cli import emit

    emit(small_report(passed=False), "html", None)
    captured = capsys.readouterr()
    assert captured.out.startswith("<!DOCTYPE html>") and "FAILED: 1/2" not in captured.out
    assert "FAIL gradients (torch DP vs jax:explicit DP)" in captured.err
    assert captured.err.strip().splitlines()[-1] == "FAILED: 1/2 checks passed"


def test_an_unwritable_out_is_refused_before_the_comparison_runs(monkeypatch, tmp_path, capsys):
    from comparisons import cli

    def comparison(pair, settings):
        raise AssertionError("the comparison ran before --out was checked")
    monkeypatch.setattr(harness, "compare_settings", comparison)
    assert cli.main(["run", "--model", "mlp", "--format", "json", "--out", str(tmp_path / "no" / "r.json")]) == 2
    assert f"--out {tmp_path / 'no' / 'r.json'}: folder {tmp_path / 'no'} does not exist" in capsys.readouterr().err
    assert cli.main(["demo", "--out", str(tmp_path)]) == 2
    assert f"--out {tmp_path}: is a folder" in capsys.readouterr().err


@pytest.mark.parametrize("raised, status", [
    (ComparisonError("compare: devices=0; pass a positive integer"), 2),
    (ConversionError("torch_to_flax: missing Flax leaf 'params.fc.kernel'"), 2),
    ("dp_jax", 2), ("dp_torch", 2),  # the backends' own UsageError: a refusal of the user's input too
    (ValueError("operands could not be broadcast together"), 70),  # not a refusal of the input: a bug
    (KeyError("params"), 70),
    (RuntimeError("XLA compilation failed"), 70),
])
def test_only_usage_errors_are_bad_input_anything_else_is_internal_with_its_traceback(monkeypatch, capsys, raised,
                                                                                       status):
    import importlib

    from comparisons import cli

    if isinstance(raised, str):
        raised = importlib.import_module(raised).UsageError(f"{raised}: device_ids=[]; pass at least one device")

    # raised by a library stand-in, not by a function of this file: a user's file would make the error theirs
    monkeypatch.setattr(harness, "compare_settings", mock.Mock(side_effect=raised))
    assert cli.main(["run", "--model", "mlp", "--torch-devices", "cpu", "--format", "json"]) == status
    err = capsys.readouterr().err
    if status == 2:
        assert err.strip() == f"error: {raised}" and "Traceback" not in err
    else:
        assert "Traceback (most recent call last)" in err and type(raised).__name__ in err
        assert "internal error (exit 70)" in err.splitlines()[-1]


@pytest.mark.parametrize("seed", [3, 11])
@pytest.mark.parametrize("fmt", ["json", "table", "markdown"])
def test_the_exit_status_is_1_when_a_check_fails_and_0_when_all_pass(monkeypatch, capsys, fmt, seed):
    """What gates a CI job: planted by making the CLI exit 0 whatever the report (caught here, nowhere else)."""
    from _helpers_harness import small_report

    from comparisons import cli

    for passed, status in ((False, 1), (True, 0)):
        monkeypatch.setattr(harness, "compare_settings",
                            lambda pair, settings, passed=passed: small_report(passed, seed))
        assert cli.main(["run", "--model", "mlp", "--torch-devices", "cpu", "--format", fmt]) == status
        capsys.readouterr()


def _report_to(out: Path, monkeypatch, seed: int) -> str:
    """`run --format json --out out` on a drawn report; the JSON text the CLI wrote."""
    from _helpers_harness import small_report

    from comparisons import cli

    report = small_report(True, seed)
    monkeypatch.setattr(harness, "compare_settings", lambda pair, settings: report)
    assert cli.main(["run", "--model", "mlp", "--torch-devices", "cpu", "--format", "json", "--out", str(out)]) == 0
    return report.render("json")


def test_out_through_a_symlink_writes_its_target_and_keeps_the_link(tmp_path, monkeypatch, capsys):
    real = tmp_path / "reports" / "latest.json"
    real.parent.mkdir()
    real.write_text("old")
    link = tmp_path / "report.json"
    link.symlink_to(real)
    expected = _report_to(link, monkeypatch, seed=5)
    assert link.is_symlink() and link.resolve() == real and real.read_text() == expected


def refused_out(path: Path, monkeypatch, capsys) -> str:
    from comparisons import cli

    monkeypatch.setattr(harness, "compare_settings", lambda pair, settings: pytest.fail("ran before --out's check"))
    assert cli.main(["run", "--model", "mlp", "--torch-devices", "cpu", "--format", "json", "--out", str(path)]) == 2
    return capsys.readouterr().err


def test_out_to_a_named_pipe_is_refused_up_front_not_left_blocking(tmp_path, monkeypatch, capsys):
    pipe = tmp_path / "report.fifo"
    os.mkfifo(pipe)  # no reader: writing would block forever
    assert f"--out {pipe}: is not a regular file (a pipe or a device" in refused_out(pipe, monkeypatch, capsys)
    assert stat.S_ISFIFO(os.stat(pipe).st_mode)


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")
def test_out_to_a_device_node_is_refused_and_leaves_the_node(tmp_path, monkeypatch, capsys):
    node = tmp_path / "null"
    os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # what /dev/null is, in a folder of our own
    assert f"--out {node}: is not a regular file" in refused_out(node, monkeypatch, capsys)
    assert stat.S_ISCHR(os.stat(node).st_mode)
