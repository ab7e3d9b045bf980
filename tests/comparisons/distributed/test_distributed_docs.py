"""docs/distributed.md's worker scripts go to a temporary folder, not the reader's current folder."""
from __future__ import annotations

import os
import subprocess
import sys

from _helpers_distributed import no_rank_left_behind  # noqa: F401
from _helpers_docs import DOCS, ROOT, python_blocks

PAGE = DOCS / "distributed.md"
THE_READERS = {"ddp_step.py": "# the reader's own ddp_step.py\n", "fails.py": "# the reader's own fails.py\n"}


def test_the_pages_worker_scripts_leave_the_current_folder_as_they_found_it(tmp_path):
    blocks = python_blocks(PAGE)
    dataparallel, ddp = blocks[0], next(b for b in blocks if "ddp_step.py" in b)
    fails = next(b for b in blocks if "fails.py" in b)  # the JAX block is skipped: the slowest, and alike
    for name, text in THE_READERS.items():
        (tmp_path / name).write_text(text)
    done = subprocess.run([sys.executable, "-c", "\n".join((dataparallel, ddp, fails))], capture_output=True,
                          text=True, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "out of data" in done.stdout  # the failing launch ran
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == THE_READERS
