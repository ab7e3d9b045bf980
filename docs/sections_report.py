"""Files the report pages show, drawn from the pages' own code: porting.md's drift chart."""
from __future__ import annotations

import contextlib
import re
import tempfile

from sections import DOCS, asset

PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


@asset("drift_layernorm_epsilon.svg")
def drift_chart() -> str:
    """porting.md's drift chart: its "Reading a verdict" blocks run (20 steps, a few seconds), then the chart of
    their `drift_report`, as the HTML report draws it."""
    from comparisons.render.chart import drift_svg

    page = (DOCS / "porting.md").read_text()
    section = page[page.index("## Reading a verdict"):]
    namespace: dict = {"__name__": "docs.porting"}
    with tempfile.TemporaryDirectory() as scratch, contextlib.chdir(scratch):  # the files the blocks write
        for number, block in enumerate(PYTHON_BLOCK.findall(section), 1):
            code = compile(block, f"porting.md, Reading a verdict, block {number}", "exec", dont_inherit=True)
            exec(code, namespace)
    report = namespace["drift_report"]
    return drift_svg(report.drift, report.tolerance["rtol"], title="LayerNorm epsilon 1e-6 for 1e-5, 20 adam steps")
