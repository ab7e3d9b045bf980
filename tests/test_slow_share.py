"""`--slow-share K/N` (tests/conftest.py): the N shares of the slow tier are disjoint and cover it; CI runs today's."""
from __future__ import annotations

import subprocess
import sys

import pytest

MATRIX = "tests/oracle/test_oracle_vs_dp_torch_matrix.py"  # hundreds of slow tests, collected in seconds


def collected(*options: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:randomly", MATRIX,
                           "-m", "slow", *options], capture_output=True, text=True, timeout=300)


def ids(done: subprocess.CompletedProcess) -> set[str]:
    assert done.returncode == 0, done.stdout + done.stderr
    return {line for line in done.stdout.splitlines() if "::" in line}


def test_the_shares_of_the_slow_tier_are_disjoint_and_cover_it():
    every = ids(collected())
    shares = [ids(collected("--slow-share", f"{k}/3")) for k in range(3)]
    assert set().union(*shares) == every and sum(map(len, shares)) == len(every)
    assert all(len(share) > len(every) / 6 for share in shares), [len(share) for share in shares]
    assert ids(collected("--slow-share", "today/3")) in shares


@pytest.mark.parametrize("share", ["3/3", "x/2", "today/0", "1"])
def test_a_share_out_of_range_is_refused_naming_the_option(share):
    done = collected("--slow-share", share)
    assert done.returncode != 0 and f"--slow-share {share!r}" in done.stdout + done.stderr
