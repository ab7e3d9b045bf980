"""The newcomer's path: each docs page's Python blocks, pasted in order into a fresh interpreter, run.

Unlike tests/test_docs.py, nothing of the test session's setup reaches them: no XLA_FLAGS, no
conftest, a clean working folder. A page that needs several JAX devices sets the count itself in
its first block (`jax.config.update("jax_num_cpu_devices", 8)` before JAX's first operation).
One interpreter per page; two quick pages run by default, every page in the slow tier.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from _helpers_docs import PAGES, ROOT, python_blocks

QUICK = {"scatter.md", "gather.md"}


def _marks(page):
    return [] if page.name in QUICK else [pytest.mark.slow]


@pytest.mark.parametrize("page", [pytest.param(p, marks=_marks(p), id=p.name) for p in PAGES if python_blocks(p)])
def test_the_page_runs_pasted_into_a_fresh_interpreter(page, tmp_path):
    environment = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_NUM_CPU_DEVICES")}
    environment["PYTHONPATH"] = str(ROOT)  # as an installed package would be importable
    script = "\n\n".join(python_blocks(page))
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=environment, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, f"{page.name}:\n{done.stderr[-3000:]}"


def test_the_quick_pages_need_the_device_count_they_set():
    """The default tier would prove nothing if its pages ran on one JAX device anyway."""
    for name in QUICK:
        text = (ROOT / "docs" / name).read_text()
        assert 'jax.config.update("jax_num_cpu_devices", 8)' in python_blocks(ROOT / "docs" / name)[0], name
        assert "dp_jax" in text
