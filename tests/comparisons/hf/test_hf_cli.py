"""docs/your_models.md's recipe module, run by the CLI with --pair, as a user would (own process)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from _helpers_docs import DOCS, ROOT, python_blocks

pytest.importorskip("transformers", reason="needs the hf extra: pip install -e '.[hf]'")


def recipe_module() -> str:
    """The page's first Python block: the module that defines PAIR."""
    block = python_blocks(DOCS / "your_models.md")[0]
    assert "PAIR = models.register(hf.pair(" in block and len(block.splitlines()) <= 25
    return block


@pytest.mark.slow
def test_the_documented_recipe_runs_from_the_cli_with_pair(tmp_path):
    (tmp_path / "your_pair.py").write_text(recipe_module())
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env.update(PYTHONPATH=f"{ROOT}{os.pathsep}{tmp_path}", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    done = subprocess.run([sys.executable, "-m", "comparisons", "run", "--pair", "your_pair:PAIR", "--devices", "2",
                           "--batch", "5", "--steps", "1", "--strategy", "explicit", "--format", "markdown"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "# dp-compare: gpt2-tiny" in done.stdout and "torch-only (declared" in done.stdout
