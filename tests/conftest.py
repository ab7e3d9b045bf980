"""Test session setup: JAX sees 8 emulated CPU devices, set before JAX first initialises; one persistent
compilation cache serves the session's CLI, docs and distributed subprocesses; `--slow-share K/N` runs a
share of the slow tier (CI runs today's eighth)."""
import atexit
import os
import shutil
import tempfile
import time
import zlib

os.environ.setdefault("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in os.environ["XLA_FLAGS"]:
    os.environ["XLA_FLAGS"] += " --xla_force_host_platform_device_count=8"

import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)

# A program one test compiles is loaded, not compiled, by the next process that needs it (36 CLI runs
# compile the same few programs). Fresh per session: no test reads another session's programs.
_COMPILE_CACHE = tempfile.mkdtemp(prefix="dp-compare-test-jax-cache-")
os.environ.setdefault("DP_COMPARE_COMPILE_CACHE", _COMPILE_CACHE)
atexit.register(shutil.rmtree, _COMPILE_CACHE, True)
# ...but not by the pytest process itself, where writing every program costs time and memory for
# little: its tests build new models, so few programs repeat. (It once looked like the cause of a
# segfault in the cache write; that was the process's memory maps: comparisons/runs/_memory_maps.py.)
jax.config.update("jax_enable_compilation_cache", False)

# XLA compiles light only where a user's run would: inside compare() on the CPU
# (comparisons/runs/_light_compiles.py). dp_jax's own tests compile as a user's dp_jax program does, fully
# optimised: at LLVM -O0 an uneven batch's short chunk can round differently in the mapped program and
# in explicit's own (by an ulp: test_jax_uneven's bitwise tests fail), and that promise is about the default.

# Virtual torch devices change process-global state; their tests run in their own pytest process:
# `python -m pytest tests/virtual` (tests/virtual/conftest.py installs vdev:0..3 there).
collect_ignore = ["virtual"]


def pytest_addoption(parser):
    parser.addoption(
        "--slow-share", default=None, metavar="K/N",
        help="of the tests marked slow, run only share K of N (0 <= K < N), each test's share fixed by a hash of its "
             "id; 'today/N' is share (days since 1970) mod N, so N days of CI runs cover the whole slow tier. "
             "Tests not marked slow are not affected.")


def pytest_collection_modifyitems(config, items):
    share = config.getoption("--slow-share")
    if share is None:
        return
    k, n = _slow_share(share)
    dropped = [item for item in items if item.get_closest_marker("slow") and zlib.crc32(item.nodeid.encode()) % n != k]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        left = set(map(id, dropped))
        items[:] = [item for item in items if id(item) not in left]


def pytest_report_header(config):
    share = config.getoption("--slow-share")
    if share is not None:
        k, n = _slow_share(share)
        return f"slow tier: share {k} of {n} (--slow-share {share}); the others run on other days"


def _slow_share(share: str) -> tuple[int, int]:
    import pytest

    k, _, n = share.partition("/")
    try:
        n_shares = int(n)
        k_share = time.time_ns() // 86_400_000_000_000 % n_shares if k == "today" else int(k)
    except (ValueError, ZeroDivisionError):
        n_shares = k_share = 0
    if not 0 <= k_share < n_shares:
        raise pytest.UsageError(f"--slow-share {share!r}: give K/N with 0 <= K < N, or today/N (e.g. --slow-share 0/3)")
    return k_share, n_shares
