"""The docs pages the tests execute, and the one reader of their ```python blocks.

tests/test_docs.py runs every block in this process, tests/test_docs_fresh_interpreter.py in a fresh one, and
the doctor, distributed and Hugging Face tests run single pages' blocks as a reader would; all read the
blocks here, so a page's blocks are the same ones whichever test runs them.
"""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md")) + [ROOT / "README.md"]
# A fence that opens with exactly ```python at the start of a line, up to the next line that starts with ```.
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks(page: Path) -> list[str]:
    """The page's ```python blocks in order, each as its source text (reads the file each call)."""
    return PYTHON_BLOCK.findall(page.read_text())
