"""Test session setup: JAX sees 8 emulated CPU devices, set before JAX first initialises."""
import os

os.environ.setdefault("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in os.environ["XLA_FLAGS"]:
    os.environ["XLA_FLAGS"] += " --xla_force_host_platform_device_count=8"

import jax  # noqa: E402

jax.config.update("jax_num_cpu_devices", 8)

# Virtual torch devices change process-global state; their tests run in their own pytest process:
# `python -m pytest tests/virtual` (tests/virtual/conftest.py installs vdev:0..3 there).
collect_ignore = ["virtual"]
