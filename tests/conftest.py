"""Test session setup: JAX sees 8 emulated CPU devices, set before JAX first initialises; one persistent
compilation cache serves the session's CLI, docs and distributed subprocesses; `--slow-share K/N` runs a
share of the slow tier (CI runs `commit/16`: the same sixteenth for the same commit)."""
import atexit
import os
import shutil
import tempfile

import pytest

# `--slow-share`: its hooks, found here by name (tests/_slow_share.py)
from _slow_share import (  # noqa: F401
    pytest_addoption,
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_report_header,
    pytest_terminal_summary,
)

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



@pytest.fixture(autouse=True)
def _virtual_devices_stay_out_of_this_process():
    """Fails the test that installs dp_torch.virtual in this process, whatever the order tests run in.

    Installing is process-wide and permanent: after it, torch.accelerator is available, gather's default
    destination is vdev:0 and stock DataParallel finds devices, so every later test would run in a
    different world (one CI share broke 238 tests this way). Such tests run in a fresh interpreter or in
    tests/virtual; compare() calls here pass torch_devices='cpu'.
    """
    from dp_torch import virtual

    why = ("this test installed dp_torch.virtual in the main pytest process (compare()'s torch_devices='auto' "
           "or the doctor's devices=N do): pass torch_devices='cpu', run it in a fresh interpreter, or move it "
           "to tests/virtual")

    def refuse(*args, **kwargs):
        # pytest.fail raises a BaseException, so no `except Exception` on the way swallows it, and the
        # install never happens: the tests after this one keep running in a world without vdev.
        pytest.fail(why, pytrace=False)

    before = virtual.is_installed()
    if not before:
        monkeypatch = pytest.MonkeyPatch()
        monkeypatch.setattr(virtual, "install", refuse)
    yield
    if not before:
        monkeypatch.undo()
        if virtual.is_installed():
            pytest.fail(why, pytrace=False)
