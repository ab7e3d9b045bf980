"""Files the report pages show, drawn from the pages' own code: porting.md's and debugging_a_port.md's drift
charts."""
from __future__ import annotations

import contextlib
import re
import tempfile

from sections import DOCS, asset

PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def run_blocks(page_name: str, heading: str) -> dict:
    """Run the python blocks of `page_name` from `heading` on, in a scratch folder; their namespace."""
    page = (DOCS / page_name).read_text()
    section = page[page.index(heading):]
    namespace: dict = {"__name__": "docs." + page_name.removesuffix(".md")}
    with tempfile.TemporaryDirectory() as scratch, contextlib.chdir(scratch):  # the files the blocks write
        for number, block in enumerate(PYTHON_BLOCK.findall(section), 1):
            code = compile(block, f"{page_name}, {heading}, block {number}", "exec", dont_inherit=True)
            exec(code, namespace)
    return namespace


@asset("drift_layernorm_epsilon.svg")
def drift_chart() -> str:
    """porting.md's drift chart: its "Reading a verdict" blocks run (20 steps, a few seconds), then the chart of
    their `drift_report`, as the HTML report draws it."""
    from comparisons.render.chart import drift_svg

    report = run_blocks("porting.md", "## Reading a verdict")["drift_report"]
    return drift_svg(report.drift, report.tolerance["rtol"], title="LayerNorm epsilon 1e-6 for 1e-5, 20 adam steps")


@asset("drift_gelu_tanh.svg")
def gelu_drift_chart() -> str:
    """debugging_a_port.md's drift chart: the whole page runs (its 20-step blocks included), then the chart of
    `drifting`, the tanh-GELU twin's run."""
    from comparisons.render.chart import drift_svg

    report = run_blocks("debugging_a_port.md", "## A planted bug")["drifting"]
    return drift_svg(report.drift, report.tolerance["rtol"], title="GELU tanh for exact, 20 adam steps")
