"""Renderings of a ComparisonReport, the top layer of comparisons: table, JSON, Markdown, HTML.

Importing this package registers each format in `comparisons.verdicts.RENDERERS`, which
`ComparisonReport.render(fmt)` reads (`_formats`: a new format is a function here plus one entry there).
Modules: `text` (table, Markdown and the shared words), `html` (the self-contained page),
`rows` (torch tensors beside their Flax counterparts in the placement grid), `numbers` (format_number),
`layers` (the layer view: the first divergence, the per-layer table, its HTML section `layer_section_html`),
`sections` (the HTML's summary first: verdict, first divergence, drift) and `chart` (the drift chart, SVG).
"""
from comparisons.render._formats import FORMATS
from comparisons.render.html import render_html
from comparisons.render.layers import layer_section_html
from comparisons.render.text import format_number, headline, print_table, to_markdown, to_table, verdict

__all__ = ["FORMATS", "format_number", "headline", "layer_section_html", "print_table", "render_html", "to_markdown",
           "to_table", "verdict"]
