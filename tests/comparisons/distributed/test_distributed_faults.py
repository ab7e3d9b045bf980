"""The real engines meeting a rank that never comes: a clear error within seconds, not a hang.

The rendezvous timeout is 2 s by design (_distributed_workers.py, beside this file); the launcher's own
timeout stays generous, so the error comes from the engine's rendezvous, named by the launcher.
"""
import time

import pytest
from _helpers_distributed import WORKERS, no_rank_left_behind, wait_for_pids, wait_until_dead  # noqa: F401

from comparisons.distributed import LaunchError, launch


@pytest.mark.parametrize("side, engine_words", [
    ("torch", "init_process_group"),   # torch's TCPStore waits for clients, then raises
    ("jax", "DEADLINE_EXCEEDED"),      # jax's coordination service aborts the process
])
def test_a_rank_that_never_joins_the_rendezvous_is_a_clear_error(tmp_path, side, engine_words):
    started = time.monotonic()
    with pytest.raises(LaunchError) as caught:
        launch([*WORKERS, f"{side}_rank1_absent"], 2, side=side, timeout=120, env={"PID_DIR": str(tmp_path)})
    error = caught.value
    assert error.side == side and error.rank == 0
    assert f"{side} rank 0 of 2" in str(error) and "timed out" in str(error)
    assert engine_words in error.stderr_tail
    assert time.monotonic() - started < 90  # the 2 s rendezvous timeout, not the launcher's 120 s
    assert wait_until_dead(wait_for_pids(tmp_path, 2, timeout=1)) == []
