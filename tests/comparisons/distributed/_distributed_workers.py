"""Small worker programs for the launcher tests: `python _distributed_workers.py MODE [ARG]` (its folder).

Each writes its pid to $PID_DIR/rank{RANK}.pid first (when PID_DIR is set), so a test can watch it.
Modes: env (hand back the rank's environment), fail (rank 1 prints ARG to stderr and exits 7,
the others sleep), sleep (every rank sleeps), stubborn (the rank and a child it starts both ignore
SIGTERM; the child writes $PID_DIR/child{RANK}.pid once it does), torch_rank1_absent / jax_rank1_absent (rank 0 runs the
real worker with a 2 s rendezvous timeout; rank 1 never joins).
"""
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from comparisons.distributed.ranks import write_result  # noqa: E402


def main(mode: str, arg: str = "") -> int:
    rank = int(os.environ["RANK"])
    if os.environ.get("PID_DIR"):
        Path(os.environ["PID_DIR"], f"rank{rank}.pid").write_text(str(os.getpid()))
    if mode == "env":
        write_result({k: os.environ[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                                  "MASTER_ADDR", "MASTER_PORT")})
        return 0
    if mode == "fail" and rank == 1:
        print(f"[Gloo] Rank 1 is connected to 1 peer ranks\nsomething went wrong: {arg}", file=sys.stderr)
        return 7
    if mode in ("torch_rank1_absent", "jax_rank1_absent") and rank == 0:
        from comparisons.distributed import jax_worker, torch_worker
        from comparisons.distributed.config import WorkerConfig

        worker = torch_worker if mode.startswith("torch") else jax_worker
        return worker.main([WorkerConfig("mlp", 4, 1, devices=1, rendezvous_timeout=2).to_json()])
    if mode == "stubborn":
        _start_a_child_that_ignores_sigterm(rank)
    time.sleep(600)
    return 0


def _start_a_child_that_ignores_sigterm(rank: int) -> None:
    import signal
    import subprocess

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ready = Path(os.environ["PID_DIR"], f"child{rank}.pid")
    subprocess.Popen([sys.executable, "-c", "import os, signal, sys, time; signal.signal(signal.SIGTERM, "
                      "signal.SIG_IGN); open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(600)",
                      str(ready)])


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
