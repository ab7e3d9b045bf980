"""docs/doctor.md's examples run the doctor on a `model.py` of their own, outside the reader's folder."""
from __future__ import annotations

import os
import subprocess
import sys

from _helpers_docs import DOCS, ROOT, python_blocks

PAGE = DOCS / "doctor.md"


def test_the_pages_examples_leave_the_current_folder_as_they_found_it(tmp_path):
    blocks = python_blocks(PAGE)
    [helper] = [b for b in blocks if "def doctor(" in b]
    first_example = next(b for b in blocks if b.lstrip().startswith("code, out = doctor("))
    (tmp_path / "model.py").write_text("# the reader's own model.py\n")
    done = subprocess.run([sys.executable, "-c", f"{helper}\n{first_example}"], capture_output=True, text=True,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.py"]
    assert (tmp_path / "model.py").read_text() == "# the reader's own model.py\n"
