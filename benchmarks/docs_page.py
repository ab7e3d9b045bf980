"""docs/performance.md: a hand-written head (kept) above the MARKER, measured tables below it."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks import report

MARKER = "<!-- benchmarks: everything below is written by `python -m benchmarks --write-docs` -->"

DEFAULT_HEAD = """# Performance: what data parallelism costs

Regenerate with `python -m benchmarks --write-docs` (about 10 minutes on 2 cores; `--quick` for a
smoke run, which writes nothing here, `--device gpu` on a CUDA machine). Every figure is a
**ratio** of two timings taken alternately in one run (A, B, B, A, ...), so load on a shared
machine slows both sides alike; we give the median and the spread (IQR, min-max) of the per-repetition ratios. Absolute
times t(A), t(B) are per call, for scale only.
"""


def head_of(path: Path) -> str:
    """The page's text above MARKER (the hand-written part), or the default head."""
    if path.exists() and MARKER in (text := path.read_text()):
        return text.split(MARKER, 1)[0].rstrip() + "\n"
    return DEFAULT_HEAD


def render(results: dict[str, Any], head: str) -> str:
    parts = [head, MARKER, "", "## Machine", "", report.machine_markdown(results["machine"])]
    if results.get("quick"):
        parts += ["**--quick run: tiny sizes, figures are a smoke test, not measurements.**", ""]
    parts += ["## Targets at a glance", "",
              "Median ratios against their targets (✗: missed); for the dp_jax strategies, the figure in "
              "brackets is the median divided by the plain-JAX reference's (what dp_jax adds).", "",
              report.targets_markdown(results["sections"])]
    for section in results["sections"]:
        parts.append(report.section_markdown(section))
    return "\n".join(parts)


def write(results: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(results, head_of(path)))
