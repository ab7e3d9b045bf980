"""compare_distributed on the real engines: DDP (gloo) on 2 ranks, JAX on 2 processes x 2 CPU devices.

One cnn_bn run (about 30-45 s on a busy 2-core machine) feeds most tests; a torch-only run measures
the uneven-batch difference. The longer matrix is marked slow.
"""
import json
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from _helpers_distributed import (
    ROOT,
    no_rank_left_behind,  # noqa: F401
    ranks_started_by,
    wait_until_dead,
)
from _helpers_harness import run_cli
from _helpers_signals import interruptible
from _table_cells import COLUMNS, header, rows, squeezed, table_lines

from comparisons import ComparisonError
from comparisons.distributed.compare import compare_distributed
from comparisons.render import to_table

SEED = random.Random().randrange(1000)  # fresh weights and inputs each session; shown in test names
JAX = "jax:multi-process"


@pytest.fixture(scope="module")
def report():
    return compare_distributed("cnn_bn", processes=2, devices=2, batch_size=8, steps=2, seed=SEED)


def by(report, subject, compared):
    matches = [c for c in report.checks if c.subject == subject and c.compared == compared]
    assert len(matches) == 1, f"{subject} / {compared}: {[(c.subject, c.compared) for c in report.checks]}"
    return matches[0]


@pytest.mark.parametrize("subject", ["outputs", "loss", "gradients", "params_after_steps"])
@pytest.mark.parametrize("compared", ["torch DDP x2 vs DataParallel x2", "JAX multi-process vs dp_jax DataParallel x4"])
def test_multi_process_runs_compute_what_one_process_dataparallel_does(report, subject, compared):
    check = by(report, subject, compared)
    assert check.passed and check.max_abs <= check.tolerance, (SEED, check)


@pytest.mark.parametrize("subject", ["outputs", "gradients", "params_after_steps"])
def test_torch_dataparallel_on_the_meshs_devices_matches_multi_process_jax(report, subject):
    check = by(report, subject, "torch DataParallel x4 vs JAX multi-process")
    assert check.passed and check.max_abs <= check.tolerance, (SEED, check)


def test_every_rank_and_every_process_ends_with_the_same_parameters(report):
    for compared in ("torch DDP rank 1 vs rank 0", "JAX multi-process process 1 vs process 0"):
        assert by(report, "params_after_steps", compared).max_abs == 0.0


def test_rank_0_keeps_chunk_0s_batchnorm_statistics_like_replica_0(report):
    assert by(report, "batch_stats", "torch DDP x2 vs DataParallel x2 (rank 0 and replica 0 keep chunk 0's)").passed
    assert by(report, "batch_stats", "JAX multi-process vs dp_jax DataParallel x4").passed


@pytest.mark.parametrize("subject, compared, why", [
    ("batch_stats_after_steps (by design)", "torch DDP rank 1 vs rank 0", "broadcasts rank 0's buffers"),
    ("gradients (by design)", "torch DDP x2 vs one device, whole batch", "without SyncBatchNorm"),
    ("gradients (by design)", "torch DDP vs JAX multi-process", "P x D groups"),
])
def test_by_design_differences_are_named_and_measured_not_tolerated(report, subject, compared, why):
    check = by(report, subject, compared)
    assert check.passed and why in check.detail
    assert check.max_abs > 10 * check.tolerance  # really there, and its size is in the report


def test_the_report_judges_to_the_documented_float32_tolerance(report):
    # docs/distributed.md: "What must agree, to the report's tolerance (1e-5 in float32)"; never widened
    assert report.tolerance["rtol"] == 1e-5 and report.tolerance["rtol_source"] == "default for float32"
    assert report.tolerance["atol"] is None and report.tolerance["float64_rtol"] is None
    assert {c.tolerance for c in report.checks if c.subject != "placement"} == {1e-5}


@pytest.mark.parametrize("scale, present", [(0.0, False), (1e-7, False), (1e-2, True)],
                         ids=["vanished", "below-tolerance", "there"])
def test_a_by_design_difference_passes_only_while_it_is_there(scale, present):
    from comparisons.distributed.judge import differs

    rng = np.random.default_rng(SEED)
    expected = {"w": rng.standard_normal((3, 2)).astype(np.float32)}
    actual = {"w": expected["w"] + np.float32(scale) * np.sign(rng.standard_normal((3, 2))).astype(np.float32)}
    check = differs("gradients", "torch DDP vs JAX multi-process", actual, expected, 1e-5, "groups")
    assert check.subject == "gradients (by design)" and check.passed is present, check


@pytest.mark.parametrize("width", [60, 80, 200, None], ids=["60", "80", "200", "no-terminal"])
def test_the_multi_process_table_keeps_its_verdict_column_and_its_header_at_any_width(report, width):
    text = to_table(report, width=width)  # None: as wide as the table needs, as in a pipe or a file
    assert header(text) == COLUMNS, text
    checks = [r for r in rows(text) if r[1]]  # a check's row (leaf rows have no check cell)
    assert [(r[0], r[1], r[2]) for r in checks] == [
        ("PASS" if c.passed else "FAIL", squeezed(c.subject), squeezed(c.compared)) for c in report.checks], text
    lines = [line for line in table_lines(text) if line.startswith("│")]
    if width is None:
        assert len(lines) == len(rows(text))  # one line per row
    else:
        assert all(len(line) <= width for line in table_lines(text))


def test_placement_records_say_which_process_holds_each_tensor(report):
    torch_map, jax_map = report.placements["torch"], report.placements[JAX]
    assert {(r.process, r.replica, r.device) for r in torch_map} == {(0, 0, "cpu"), (1, 1, "cpu")}
    rows = {r.process: r.shape[0] for r in torch_map if r.role == "input"}
    assert rows == {0: 4, 1: 4}
    holders = {(r.process, r.logical_index, r.device) for r in jax_map if r.path == "params.fc.kernel"}
    assert len(holders) == 4 and {p for p, _, _ in holders} == {0, 1}
    assert all(index // 2 == process for process, index, _ in holders)
    assert len({device for _, _, device in holders}) == 4  # four distinct devices across the two processes
    assert {r.shape[0] for r in jax_map if r.role == "input" and r.path == "args.0"} == {2}


def test_the_notes_explain_jax_device_ids_beside_their_mesh_positions(report):
    [note] = [n for n in report.notes if n.startswith("jax device names are JAX's device ids")]
    held = sorted({(r.process, r.logical_index, r.device) for r in report.placements[JAX]})
    for process, index, device in held:
        assert f"{device} (device {index})" in note and index // 2 == process
    assert "process 1: cpu:2048 (device 2), cpu:2049 (device 3)" in note  # JAX 0.10's ids for process 1


def test_the_html_and_json_reports_show_process_by_device(report):
    page = report.render("html")
    assert "Placement: process × device (torch)" in page and f"Placement: process × device ({JAX})" in page
    assert "process 1" in page
    rows = json.loads(report.render("json"))["placements"][JAX]
    assert {row["process"] for row in rows} == {0, 1}


def test_an_uneven_global_batch_is_measured_against_ddps_own_objective():
    report = compare_distributed("mlp", processes=2, batch_size=5, steps=2, seed=SEED, sides=("torch",))
    assert report.ok and report.chunk_sizes == [3, 2]
    for subject in ("loss", "gradients", "params_after_steps"):
        assert by(report, subject, "torch DDP x2 vs DataParallel x2 on DDP's objective").passed
        measured = by(report, f"{subject} (by design)", "torch DDP x2 vs DataParallel x2")
        assert measured.passed and measured.max_abs > 10 * measured.tolerance and "uneven" in measured.detail


@pytest.mark.parametrize("kwargs, words", [
    ({"batch_size": 10}, "multiple of 4"),
    ({"pair": "my_own_net"}, "'my_own_net' is not a registered pair"),
    ({"batch_size": 1, "sides": ("torch",)}, "part 1 would get no rows"),
    ({"sides": ("tensorflow",)}, "sides=['tensorflow']"),
    ({"processes": 0}, "processes=0"),
])
def test_bad_arguments_are_refused_before_any_process_starts(kwargs, words):
    settings = {"pair": "cnn_bn", "processes": 2, "devices": 2, **kwargs}
    with pytest.raises(ComparisonError, match=words.replace("[", r"\[")):
        compare_distributed(settings.pop("pair"), **settings)


@pytest.mark.parametrize("sides, words", [
    ("torch", "sides='torch' is one string; pass a tuple, sides=('torch',)"),
    ("jax", "sides='jax' is one string; pass a tuple, sides=('jax',)"),
    ("torch,jax", "sides='torch,jax' is one string"),
    (3, "sides=3 is not a sequence of side names"),
    ((), "sides=[]; pass one or both of ('torch', 'jax')"),
])
def test_sides_must_be_a_sequence_of_names_not_one_string(sides, words):
    with pytest.raises(ComparisonError) as raised:
        compare_distributed("cnn_bn", processes=2, devices=2, sides=sides)
    assert words in str(raised.value) and "['t', " not in str(raised.value)


def test_cli_refuses_a_batch_the_mesh_cannot_split_and_explains_the_flag():
    done = run_cli("run", "--processes", "2", "--devices", "2", "--model", "cnn_bn", "--batch", "10", timeout=120)
    assert done.returncode == 2 and "multiple of 4" in done.stderr
    assert "--processes P" in run_cli("run", "--help", timeout=120).stdout


def test_ctrl_c_to_the_cli_ends_every_rank():
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    command = [sys.executable, "-m", "comparisons", "run", "--processes", "2", "--devices", "2",
               "--model", "mlp", "--steps", "2"]
    cli = subprocess.Popen(interruptible(command), cwd=ROOT, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and len(ranks_started_by(cli.pid)) < 4:  # 2 torch + 2 JAX ranks
            time.sleep(0.1)
        ranks = ranks_started_by(cli.pid)
        assert len(ranks) == 4
        cli.send_signal(signal.SIGINT)
        _, stderr = cli.communicate(timeout=60)
    finally:
        cli.kill()
    assert cli.returncode == 130 and "interrupted" in stderr
    assert wait_until_dead(ranks) == []


@pytest.mark.slow
def test_cli_runs_the_issues_command():
    done = run_cli("run", "--processes", "2", "--devices", "2", "--model", "cnn_bn", "--steps", "3",
                   "--format", "json", timeout=300)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["ok"] and data["batch_size"] == 16 and data["chunk_sizes"] == [4, 4, 4, 4]


@pytest.mark.slow
@pytest.mark.parametrize("pair, processes, devices, optimizer, dtype", [
    ("mlp", 3, 1, "adam", "float32"),
    ("transformer_block", 2, 2, "momentum", "float64"),
    ("embedding_lstm", 2, 2, "sgd", "float32"),
    ("cnn_bn", 2, 4, "momentum", "float64"),
])
def test_matrix(pair, processes, devices, optimizer, dtype):
    report = compare_distributed(pair, processes=processes, devices=devices, steps=2, optimizer=optimizer,
                                 dtype=dtype, seed=SEED, timeout=300)
    assert report.ok, [c for c in report.failures]
    assert np.all([c.max_abs is not None for c in report.checks if c.subject != "placement"])


@pytest.mark.slow
def test_the_torch_worker_runs_under_torchrun():
    from comparisons.distributed import WorkerConfig, free_port

    config = WorkerConfig("mlp", 8, 2, seed=SEED).to_json()
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                           "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
                           "-m", "comparisons.distributed.torch_worker", config],
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "torch rank 1: step 2/2" in done.stderr and "torch rank 0: step 2/2" in done.stderr
