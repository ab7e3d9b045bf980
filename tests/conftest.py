"""Test session setup: JAX sees 8 emulated CPU devices, set before JAX first initialises; one persistent
compilation cache serves the session's comparisons, in this process and the CLI and docs subprocesses."""
import atexit
import os
import shutil
import tempfile

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

# Virtual torch devices change process-global state; their tests run in their own pytest process:
# `python -m pytest tests/virtual` (tests/virtual/conftest.py installs vdev:0..3 there).
collect_ignore = ["virtual"]
