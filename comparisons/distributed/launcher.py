"""Start P local worker processes on 127.0.0.1, watch them, and leave none behind.

Each rank gets a torchrun-compatible environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
MASTER_ADDR, MASTER_PORT) on a free port, its own process group (so stopping a rank stops what it
started), and a parent-death signal (so a launcher killed outright takes its ranks with it).
The launcher polls every rank: the first one to fail stops all the others, and the caller gets one
`LaunchError` naming the side, the rank, its exit status and the tail of its stderr. A run past
its `timeout`, Ctrl-C (KeyboardInterrupt) and SIGTERM stop every rank too. Standard library only.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from comparisons.distributed.ranks import (
    LAUNCHER_PID_ENV,
    RESULT_DIR_ENV,
    SIDES,
    LaunchError,
    RankResult,
    check_port_free,
    free_port,
    torch_env,
)
from comparisons.errors import UsageError, UsageTypeError

_POLL_S = 0.05
_GRACE_S = 1.0
_TAIL_LINES = 15
_FOLDER_PREFIX = "dp_compare_run_"  # + launcher pid + side: a dead launcher's folder can be found and removed
# Lines that say nothing about a failure: gloo's connection notices, absl stack frame addresses.
_NOISE = ("[Gloo] Rank", "    @ ")


class Launch:
    """P ranks of `command`, started by `start()` and collected by `wait()`; a context manager.

    Args:
      command: the worker's argv (e.g. [sys.executable, "-m", "comparisons.distributed.torch_worker", cfg]).
      processes: number of ranks P.
      side: "torch" or "jax" (anything else is refused); only for messages.
      timeout: seconds for the whole run, start-up included.
      port: MASTER_PORT, 1..65535; None picks a free one. A given port that is taken fails before any start.
      env: extra environment variables for every rank.
    """

    def __init__(self, command: Sequence[str], processes: int, *, side: str, timeout: float = 120.0,
                 port: int | None = None, env: Mapping[str, str] | None = None) -> None:
        if isinstance(processes, bool) or not isinstance(processes, int) or processes < 1:
            raise UsageError(f"Launch: processes={processes!r}; pass a positive integer")
        if not timeout > 0:
            raise UsageError(f"Launch: timeout={timeout!r}; pass a positive number of seconds")
        if side not in SIDES:
            raise UsageError(f"Launch: side={side!r}; pass 'torch' or 'jax' (the side named in every message)")
        _check_port(port)
        self.command, self.processes, self.side, self.timeout = list(command), processes, side, timeout
        self.port, self.env = port, dict(env or {})
        self.procs: list[subprocess.Popen] = []
        self._folder: tempfile.TemporaryDirectory | None = None
        self._started = 0.0

    @property
    def pids(self) -> list[int]:
        return [proc.pid for proc in self.procs]

    def start(self) -> Launch:
        """Start every rank (each in its own process group); returns self. A Launch starts once."""
        if self._folder is not None:
            raise RuntimeError(f"Launch.start: this {self.side} launch has started already; make a new Launch")
        if self.port is None:
            self.port = free_port()
        else:
            check_port_free(self.port, side=self.side)
        _remove_orphaned_folders()
        self._folder = tempfile.TemporaryDirectory(prefix=f"{_FOLDER_PREFIX}{os.getpid()}_{self.side}_")
        self._started = time.monotonic()
        try:
            for rank in range(self.processes):
                self.procs.append(self._spawn(rank))
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn(self, rank: int) -> subprocess.Popen:
        folder = Path(self._folder.name)
        env = {**os.environ, **self.env, **torch_env(rank, self.processes, self.port),
               RESULT_DIR_ENV: str(folder), LAUNCHER_PID_ENV: str(os.getpid()), "PYTHONUNBUFFERED": "1"}
        with open(folder / f"rank{rank}.out", "wb") as out, open(folder / f"rank{rank}.err", "wb") as err, \
                warnings.catch_warnings():
            # JAX warns at every os.fork; this child runs one C call (prctl) and then exec, so it cannot deadlock.
            warnings.filterwarnings("ignore", "os.fork", RuntimeWarning)
            return subprocess.Popen(self.command, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    start_new_session=True, preexec_fn=_die_with_parent)

    def wait(self) -> list[RankResult]:
        """Block until every rank exits 0 (their results, by rank) or one fails (LaunchError).

        Every rank is stopped before this returns or raises, also on KeyboardInterrupt or SIGTERM.
        """
        with _sigterm_as_exit():
            try:
                return self._watch()
            finally:
                self.stop()

    def _watch(self) -> list[RankResult]:
        deadline = self._started + self.timeout
        finished: dict[int, float] = {}
        while len(finished) < self.processes:
            for rank, proc in enumerate(self.procs):
                code = proc.poll()
                if code is None or rank in finished:
                    continue
                if code != 0:
                    raise self._failure(rank, code)
                finished[rank] = time.monotonic() - self._started
            if time.monotonic() > deadline and len(finished) < self.processes:
                raise self._timed_out(sorted(set(range(self.processes)) - set(finished)))
            time.sleep(_POLL_S)
        return [RankResult(rank, self._result(rank), finished[rank], self.stderr_tail(rank))
                for rank in range(self.processes)]

    def _result(self, rank: int) -> Any:
        path = Path(self._folder.name) / f"rank{rank}.pkl"
        return pickle.loads(path.read_bytes()) if path.exists() else None

    def stderr_tail(self, rank: int, lines: int = _TAIL_LINES) -> str:
        """The last `lines` meaningful lines of rank `rank`'s stderr (gloo notices and frame addresses left out)."""
        if self._folder is None:
            return ""
        text = (Path(self._folder.name) / f"rank{rank}.err").read_text(errors="replace")
        kept = [line for line in text.splitlines() if line.strip() and not line.startswith(_NOISE)]
        return "\n".join(kept[-lines:])

    def _failure(self, rank: int, code: int) -> LaunchError:
        tail = self.stderr_tail(rank)
        status = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with status {code}"
        hint = _hint(tail, self.port)
        message = (f"{self.side} rank {rank} of {self.processes} {status}; the other ranks were stopped."
                   f"{hint}\n--- {self.side} rank {rank} stderr (last lines) ---\n{tail or '(empty)'}")
        return LaunchError(message, side=self.side, rank=rank, returncode=code, stderr_tail=tail)

    def _timed_out(self, running: list[int]) -> LaunchError:
        tails = "\n".join(f"--- {self.side} rank {r} stderr (last lines) ---\n{self.stderr_tail(r, 6) or '(empty)'}"
                          for r in running)
        message = (f"{self.side}: ranks {running} of {self.processes} still running after timeout="
                   f"{self.timeout:g} s (a hung rendezvous or collective, or a slow machine); all ranks were "
                   f"stopped. Pass a larger timeout if the machine is just slow.\n{tails}")
        return LaunchError(message, side=self.side, rank=running[0] if len(running) == 1 else None,
                           stderr_tail=tails)

    def stop(self) -> None:
        """Stop every rank still running (SIGTERM to its process group, SIGKILL after a grace period)."""
        for proc in self.procs:
            _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + _GRACE_S
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.0, deadline - time.monotonic()))
        for proc in self.procs:
            _signal_group(proc, signal.SIGKILL)  # the group may hold more than the rank itself
            proc.wait()

    def close(self) -> None:
        self.stop()
        if self._folder is not None:
            self._folder.cleanup()
            self._folder = None

    def __enter__(self) -> Launch:
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


def launch(command: Sequence[str], processes: int, *, side: str, timeout: float = 120.0,
           port: int | None = None, env: Mapping[str, str] | None = None) -> list[RankResult]:
    """Run P ranks of `command` to the end (see `Launch`); their results by rank, or a LaunchError.

    Cost: P Python processes (their imports and start-up) plus polling every 50 ms.
    """
    with Launch(command, processes, side=side, timeout=timeout, port=port, env=env) as run:
        return run.wait()


def _check_port(port: Any) -> None:
    """None, or a TCP port a rank can listen on: 0 would make each rank pick its own, and no rendezvous."""
    if port is None:
        return
    if isinstance(port, bool) or not isinstance(port, int):
        raise UsageTypeError(f"Launch: port={port!r} is not an integer; pass a TCP port 1..65535, or port=None "
                             "for a free one")
    if not 1 <= port <= 65535:
        raise UsageError(f"Launch: port={port}; pass a TCP port 1..65535, or port=None for a free one")


def _remove_orphaned_folders() -> None:
    """Delete the result folders of launchers that died without cleaning up (killed, or os._exit)."""
    for folder in Path(tempfile.gettempdir()).glob(f"{_FOLDER_PREFIX}*_*_*"):
        pid = folder.name.removeprefix(_FOLDER_PREFIX).split("_", 1)[0]
        if pid.isdigit() and not _running(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal_group(proc: subprocess.Popen, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)  # the rank leads its own group (start_new_session)


def _hint(tail: str, port: int | None) -> str:
    lowered = tail.lower()
    if "address already in use" in lowered or "failed to add port" in lowered:
        return f" Port {port} looks taken by another program: run again (a new free port is picked)."
    if "deadline" in lowered or "timed out" in lowered or "timeout" in lowered:
        return " It looks like a rendezvous or collective timed out: another rank may have died or never started."
    return ""


_PRCTL = ctypes.CDLL(None).prctl if sys.platform.startswith("linux") else None  # looked up before any fork


def _die_with_parent() -> None:
    """In the child, before exec: get SIGKILL when the launcher dies (Linux), so no rank outlives it."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


@contextlib.contextmanager
def _sigterm_as_exit():
    """SIGTERM to the launcher raises SystemExit here, so the `finally` that stops the ranks runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise SystemExit(128 + signum)
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
