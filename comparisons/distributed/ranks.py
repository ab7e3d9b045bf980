"""What a rank sees and hands back: its torchrun-style environment, a free port, its result file,
and the error a failed run raises. Standard library only; a worker imports `write_result` from here.
"""
from __future__ import annotations

import dataclasses
import errno
import os
import pickle
import socket
from pathlib import Path
from typing import Any

SIDES = ("torch", "jax")  # what a multi-process run runs; a launch names its side in every message
RESULT_DIR_ENV = "DP_COMPARE_RESULT_DIR"
LAUNCHER_PID_ENV = "DP_COMPARE_LAUNCHER_PID"  # lets a test find every rank a process started


class LaunchError(RuntimeError):
    """A multi-process run failed: a rank exited non-zero, it timed out, or the port is taken.

    `side` ("torch" or "jax"), `rank` (None when no single rank is to blame), `returncode` and
    `stderr_tail` are kept as attributes; the message says all of them and what to do.
    """

    def __init__(self, message: str, *, side: str, rank: int | None = None,
                 returncode: int | None = None, stderr_tail: str = "") -> None:
        super().__init__(message)
        self.side, self.rank, self.returncode, self.stderr_tail = side, rank, returncode, stderr_tail


@dataclasses.dataclass(frozen=True)
class RankResult:
    """What one rank left behind: the value it wrote with `write_result`, its run time and stderr."""

    rank: int
    value: Any
    seconds: float
    stderr_tail: str


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (bind to 0, read it back, close). Another program may take it
    before the workers bind it; then the rank that binds it fails and says so."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def check_port_free(port: int, *, side: str, host: str = "127.0.0.1") -> None:
    """Raise LaunchError if `port` on `host` cannot be bound (taken): a worker would crash or hang on it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError as error:
            if error.errno != errno.EADDRINUSE:
                raise
            raise LaunchError(f"{side}: port={port} on {host} is taken by another program; pass another "
                              "port or port=None for a free one", side=side) from None


def torch_env(rank: int, world_size: int, port: int, host: str = "127.0.0.1") -> dict[str, str]:
    """The variables torchrun sets for a rank on one node (init_process_group's env:// reads them)."""
    return {"RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": str(world_size), "GROUP_RANK": "0", "MASTER_ADDR": host,
            "MASTER_PORT": str(port)}


def write_result(value: Any) -> None:
    """In a worker: hand `value` (picklable) back to the launcher, written atomically for this RANK."""
    folder, rank = os.environ.get(RESULT_DIR_ENV), os.environ.get("RANK", "0")
    if folder is None:
        return  # run by hand or by torchrun: nobody collects results
    path = Path(folder) / f"rank{rank}.pkl"
    partial = path.with_suffix(".part")
    partial.write_bytes(pickle.dumps(value))
    partial.replace(path)
