"""The HTML report's answer-first sections: the summary (verdict, first divergence, drift chart).
`html.render_html` puts them above the per-layer table, the placement grid and the folded check table.

`first_divergence` and `layer_view` are read with getattr: a report without them (older ones, or before
the layer view runs) renders the same page without those parts.
"""
from __future__ import annotations

import dataclasses
from html import escape
from typing import Any

from comparisons.judge import classify_drift, drift_line
from comparisons.render.text import verdict, worst_leaf
from comparisons.verdicts import ComparisonReport


def summary_section(report: ComparisonReport) -> str:
    """The verdict in one line, every failing check in one line each, the first divergence, the drift."""
    passed = len(report.checks) - len(report.failures)
    words = "every check passed" if report.ok else f"{len(report.failures)} of {len(report.checks)} checks failed"
    parts = ["<section class=summary><h2>Summary</h2>",
             f"<p class=verdict><span class={'ok' if report.ok else 'bad'}>{'OK' if report.ok else 'FAILED'}</span>: "
             f"{escape(words)} ({passed}/{len(report.checks)} passed).</p>"]
    if report.failures:
        parts.append("<ul class=failures>" + "".join(_failure_item(check) for check in report.failures) + "</ul>")
    parts += [_first_divergence(getattr(report, "first_divergence", None)), drift_section(report), "</section>"]
    return "\n".join(part for part in parts if part)


def _failure_item(check) -> str:
    cause = f" [{check.cause}]" if check.cause else ""
    return (f"<li>{verdict(check)} {escape(check.subject)} ({escape(check.compared)}){escape(cause)}: "
            f"<code>{escape(worst_leaf(check))}</code></li>")


def _first_divergence(found: Any) -> str:
    """Where the two sides first part: inside one layer, or between two (unmapped code); '' when none."""
    if not found:
        return ""
    found = dataclasses.asdict(found) if dataclasses.is_dataclass(found) else dict(found)
    torch_path, flax_path = found.get("torch"), found.get("flax")
    if found.get("where") == "between":
        before = found.get("previous")
        before = "the model input" if before is None else f"<code>{escape(str(before))}</code>"
        after = "the model output" if torch_path == "(output)" else f"<code>{escape(str(torch_path))}</code>"
        place = f"between {before} and {after}: in unmapped code (an activation, a reshape, a residual)"
    else:
        place = f"inside <code>{escape(str(torch_path))}</code> (Flax <code>{escape(str(flax_path))}</code>)"
    cause = f" ({escape(found['cause'])})" if found.get("cause") else ""
    words = next((found[key] for key in ("message", "detail") if found.get(key)), "")
    return (f"<p class=divergence><b>First divergence</b>: {place}{cause}."
            + (f" {escape(str(words))}" if words else "") + "</p>")


def drift_section(report: ComparisonReport) -> str:
    """The drift line and its chart (matplotlib's SVG, inline); '' for a report without a drift."""
    if not report.drift:
        return ""
    from comparisons.render.chart import chart_caption, drift_svg

    rtol = report.tolerance["rtol"]
    kind, _ = classify_drift(report.drift, rtol, report.dtype)
    line = drift_line(report.drift, rtol, report.dtype)
    return (f"<div class=drift><p class='drift-line {'ok' if kind == 'rounding' else 'bad'}'>{escape(line)}</p>"
            f"<figure class=chart>{drift_svg(report.drift, rtol)}<figcaption>{chart_caption(report.drift)}"
            "</figcaption></figure></div>")
