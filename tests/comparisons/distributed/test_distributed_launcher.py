"""The launcher: torchrun's environment, results by rank, and every fault path ends every rank.

The workers here are tiny Python programs (_distributed_workers.py, beside this file), so these tests take
seconds; test_distributed_faults.py makes the real engines hang or die.
"""
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid

import pytest
from _helpers_distributed import (
    ROOT,
    WORKERS,
    alive,
    no_rank_left_behind,  # noqa: F401  (autouse: no rank left after the module)
    ranks_started_by,
    wait_for_pids,
    wait_until_dead,
)
from _helpers_signals import interruptible

from comparisons.distributed import Launch, LaunchError, launch
from comparisons.errors import UsageError, UsageTypeError


def test_each_rank_gets_torchruns_environment_and_its_result_comes_back_by_rank():
    results = launch([*WORKERS, "env"], 3, side="torch", timeout=60)
    envs = [r.value for r in results]
    assert [r.rank for r in results] == [0, 1, 2] and [e["RANK"] for e in envs] == ["0", "1", "2"]
    assert [e["LOCAL_RANK"] for e in envs] == ["0", "1", "2"]
    assert {e["WORLD_SIZE"] for e in envs} == {"3"} and {e["LOCAL_WORLD_SIZE"] for e in envs} == {"3"}
    assert {e["MASTER_ADDR"] for e in envs} == {"127.0.0.1"}
    assert len({e["MASTER_PORT"] for e in envs}) == 1 and int(envs[0]["MASTER_PORT"]) > 0


def test_a_failing_rank_stops_the_others_and_the_error_names_side_rank_and_stderr(tmp_path):
    token = uuid.uuid4().hex
    run = Launch([*WORKERS, "fail", token], 3, side="jax", timeout=60, env={"PID_DIR": str(tmp_path)})
    with run, pytest.raises(LaunchError) as caught:
        pids = wait_for_pids(tmp_path, 3)
        run.wait()
    error = caught.value
    assert (error.side, error.rank, error.returncode) == ("jax", 1, 7)
    assert "jax rank 1 of 3 exited with status 7" in str(error) and token in str(error)
    assert "[Gloo]" not in error.stderr_tail  # gloo's connection notices are left out of the tail
    assert wait_until_dead(pids) == []


def test_a_rank_killed_mid_run_is_named_and_the_others_are_stopped(tmp_path):
    run = Launch([*WORKERS, "sleep"], 2, side="torch", timeout=60, env={"PID_DIR": str(tmp_path)})
    with run, pytest.raises(LaunchError, match="torch rank 1 of 2 was killed by SIGKILL") as caught:
        pids = wait_for_pids(tmp_path, 2)
        os.kill(pids[1], signal.SIGKILL)
        run.wait()
    assert caught.value.rank == 1 and caught.value.returncode == -signal.SIGKILL
    assert wait_until_dead(pids) == []


def test_a_run_past_its_timeout_is_an_error_naming_the_running_ranks(tmp_path):
    started = time.monotonic()
    with pytest.raises(LaunchError, match=r"ranks \[0, 1\] of 2 still running after timeout=3 s"):
        launch([*WORKERS, "sleep"], 2, side="torch", timeout=3, env={"PID_DIR": str(tmp_path)})
    assert time.monotonic() - started < 20
    assert wait_until_dead(wait_for_pids(tmp_path, 2, timeout=1)) == []


def test_a_taken_port_is_refused_before_any_rank_starts():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        run = Launch([*WORKERS, "sleep"], 2, side="torch", port=port)
        with pytest.raises(LaunchError, match=f"port={port} on 127.0.0.1 is taken"):
            run.start()
    assert run.procs == []


@pytest.mark.parametrize("side", ["tf", "Torch", "", None])
def test_a_side_that_is_not_torch_or_jax_is_refused_before_any_rank_starts(side):
    with pytest.raises(UsageError, match=f"Launch: side={side!r}; pass 'torch' or 'jax'"):
        launch([*WORKERS, "sleep"], 2, side=side, timeout=2)  # unrefused, the sleeping ranks time out


@pytest.mark.parametrize("port", [70000, 65536, 0, -1])
def test_a_port_out_of_range_is_refused_naming_port(port):
    with pytest.raises(UsageError, match=f"Launch: port={port}; pass a TCP port 1..65535, or port=None"):
        launch([*WORKERS, "sleep"], 2, side="torch", port=port, timeout=2)


@pytest.mark.parametrize("port", ["29500", 29500.0, True])
def test_a_port_that_is_not_an_integer_is_a_usage_type_error(port):
    with pytest.raises(UsageTypeError, match=f"Launch: port={port!r} is not an integer"):
        Launch([*WORKERS, "sleep"], 2, side="jax", port=port)


LAUNCHER = """
import sys
sys.path.insert(0, {root!r})
from comparisons.distributed import launch
launch({workers!r} + ["sleep"], 2, side="torch", timeout=300, env={{"PID_DIR": {folder!r}}})
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_the_launcher_stopped_by_a_signal_leaves_no_rank_behind(tmp_path, sig):
    code = LAUNCHER.format(root=str(ROOT), workers=WORKERS, folder=str(tmp_path))
    launcher = subprocess.Popen(interruptible([sys.executable, "-c", code]), stderr=subprocess.PIPE, text=True)
    try:
        pids = wait_for_pids(tmp_path, 2)
        assert all(map(alive, pids))
        launcher.send_signal(sig)  # SIGINT is what Ctrl-C sends
        _, stderr = launcher.communicate(timeout=30)
    finally:
        launcher.kill()
    assert launcher.returncode != 0
    if sig == signal.SIGINT:
        assert "KeyboardInterrupt" in stderr
    assert wait_until_dead(pids) == []
    assert ranks_started_by(launcher.pid) == []


def test_the_leftover_probe_sees_a_running_rank(tmp_path):
    run = Launch([*WORKERS, "sleep"], 1, side="torch", timeout=60, env={"PID_DIR": str(tmp_path)})
    with run:
        pid, = wait_for_pids(tmp_path, 1)
        assert ranks_started_by(os.getpid()) == [pid]
    assert ranks_started_by(os.getpid()) == []


def test_a_launch_starts_once():
    with Launch([*WORKERS, "env"], 1, side="torch", timeout=60) as run:
        with pytest.raises(RuntimeError, match="has started already"):
            run.start()
        assert len(run.wait()) == 1


def test_a_dead_launchers_result_folder_is_removed_and_live_launchers_folders_are_left_alone(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    other_launcher = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])  # live, not us
    try:
        dead = tmp_path / f"dp_compare_run_{_dead_pid()}_torch_abc"
        live = [tmp_path / f"dp_compare_run_{pid}_{side}_def" for pid, side in ((os.getpid(), "jax"),
                                                                               (other_launcher.pid, "torch"))]
        for folder in (dead, *live):
            folder.mkdir()
            (folder / "rank0.err").write_text("old")
        launch([*WORKERS, "env"], 1, side="torch", timeout=60)
        assert not dead.exists()
        assert all((folder / "rank0.err").read_text() == "old" for folder in live)
    finally:
        other_launcher.kill()
        other_launcher.wait()


def test_stopping_a_rank_ends_its_whole_process_group_children_that_ignore_sigterm_included(tmp_path):
    run = Launch([*WORKERS, "stubborn"], 1, side="torch", timeout=60, env={"PID_DIR": str(tmp_path)})
    child = None
    try:
        with run:
            rank, = wait_for_pids(tmp_path, 1)
            child = _wait_for_pid_file(tmp_path / "child0.pid")
            assert alive(rank) and alive(child)
        assert wait_until_dead([rank, child]) == []
    finally:
        if child is not None and alive(child):
            os.kill(child, signal.SIGKILL)


def _wait_for_pid_file(path, timeout: float = 60.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return int(path.read_text())
        time.sleep(0.05)
    raise AssertionError(f"{path} was not written within {timeout} s")


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid
