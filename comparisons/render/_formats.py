"""The report formats, registered in `comparisons.verdicts.RENDERERS` when this module is imported (verdicts
is below render/ and reads the table, never imports render/): a new format is a function in this folder
plus one entry here."""
from __future__ import annotations

from comparisons.render.html import render_html
from comparisons.render.text import to_markdown, to_table
from comparisons.verdicts import RENDERERS, ComparisonReport

RENDERERS.update(table=to_table, json=ComparisonReport.to_json, markdown=to_markdown, html=render_html)
FORMATS = tuple(RENDERERS)
