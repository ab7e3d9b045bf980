"""DP_COMPARE_COMPILE_CACHE=off in any case and spacing turns the persistent cache off: no folder named after it."""
from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_off_in_any_case_is_off_and_creates_nothing(tmp_path):
    setting = "".join(random.choice((c.upper(), c)) for c in "off").center(random.randint(4, 7))
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env.update(DP_COMPARE_COMPILE_CACHE=setting, PYTHONPATH=str(ROOT), XDG_CACHE_HOME=str(tmp_path / "xdg"))
    done = subprocess.run([sys.executable, "-c", "from comparisons.runs import use_compile_cache; "
                           "print(use_compile_cache())"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "None", (setting, done.stdout)
    assert sorted(p.name for p in tmp_path.iterdir()) == [], (setting, list(tmp_path.iterdir()))
