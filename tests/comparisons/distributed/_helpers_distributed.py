"""Helpers for the multi-process tests: find the ranks a launcher started and tell whether they live."""
import os
import sys
import time
from pathlib import Path

import pytest

from comparisons.distributed.ranks import LAUNCHER_PID_ENV

ROOT = Path(__file__).resolve().parents[3]  # the repository: tests/comparisons/distributed/ is three below
WORKERS = [sys.executable, str(Path(__file__).resolve().parent / "_distributed_workers.py")]


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, or a pid that is gone, counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def ranks_started_by(launcher_pid: int) -> list[int]:
    """Live processes whose environment says `launcher_pid` launched them (LAUNCHER_PID_ENV)."""
    marker = f"{LAUNCHER_PID_ENV}={launcher_pid}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker in environ.split(b"\0") and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def wait_for_pids(folder: Path, count: int, timeout: float = 60.0) -> list[int]:
    """The pids the test workers wrote into `folder` (rank order), once all `count` are there."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        files = [folder / f"rank{r}.pid" for r in range(count)]
        if all(f.exists() and f.read_text() for f in files):
            return [int(f.read_text()) for f in files]
        time.sleep(0.05)
    raise AssertionError(f"the workers did not all start within {timeout} s")


def wait_until_dead(pids: list[int], timeout: float = 10.0) -> list[int]:
    """The pids still alive after `timeout` seconds (an empty list is what the tests want)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(map(alive, pids)):
        time.sleep(0.05)
    return [pid for pid in pids if alive(pid)]


@pytest.fixture(scope="module", autouse=True)
def no_rank_left_behind():
    """After a test module: no rank this pytest process launched is still running."""
    assert ranks_started_by(os.getpid()) == []
    yield
    assert wait_until_dead(ranks_started_by(os.getpid()), timeout=5) == []
