"""A DoctorReport as text ('table'), JSON or a self-contained HTML page in the report's style."""
from __future__ import annotations

import textwrap
from html import escape

from comparisons.doctor.findings import RENDERERS, DoctorReport, Finding


def render(report: DoctorReport, fmt: str = "table") -> str:
    """The report in `fmt` (one of FORMATS)."""
    return report.render(fmt)


def headline(report: DoctorReport) -> str:
    count = len(report.findings)
    verdict = "nothing found" if not count else f"{count} finding{'s' if count > 1 else ''}"
    return f"doctor: {report.target} on {', '.join(report.devices)} ({report.backend}): {verdict}"


def to_table(report: DoctorReport, width: int = 100) -> str:
    """One block per finding: kind, where, replicas and devices on a line, then what and fix, wrapped."""
    lines = [headline(report)]
    for finding in report.findings:
        lines += ["", f"{finding.kind:<22} {finding.where}", f"  {_involved(finding)}"]
        lines += textwrap.wrap(finding.message, width, initial_indent="  what: ", subsequent_indent="        ")
        lines += textwrap.wrap(finding.fix, width, initial_indent="  fix:  ", subsequent_indent="        ")
    lines += [f"note: {note}" for note in report.notes]
    return "\n".join(lines)


def _involved(finding: Finding) -> str:
    parts = [f"replicas {', '.join(map(str, finding.replicas))}"] if finding.replicas else []
    if finding.devices:
        parts.append(f"devices {', '.join(finding.devices)}")
    if finding.source and finding.source != finding.where:
        parts.append(f"line {finding.source}")
    return "; ".join(parts) or "every replica (at trace time)"


# The comparison report's look (comparisons/render/html.py), in a few rules.
CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222}
h1{font-size:20px;margin:0 0 4px} .ok{color:#0a7a32;font-weight:600} .bad{color:#b00020;font-weight:600}
table{border-collapse:collapse;margin:8px 0}
th,td{border:1px solid #ccc;padding:3px 6px;font-size:12px;vertical-align:top}
th{background:#f3f3f3;text-align:left} tr.fail td{background:#fde7ea}
td.where{font-family:monospace;white-space:nowrap} td.kind{white-space:nowrap;font-weight:600}
"""


def to_html(report: DoctorReport) -> str:
    """One HTML document: the headline, then a table of findings (inline CSS, no scripts)."""
    status = "<span class=ok>OK</span>" if report.ok else "<span class=bad>FOUND PROBLEMS</span>"
    rows = ["<table><tr><th>kind</th><th>where</th><th>replicas</th><th>devices</th><th>what DataParallel "
            "does</th><th>fix</th></tr>"]
    for f in report.findings:
        where = escape(f.where) + (f"<br>{escape(f.source)}" if f.source and f.source != f.where else "")
        rows.append(f"<tr class=fail><td class=kind>{escape(f.kind)}</td><td class=where>{where}</td>"
                    f"<td>{escape(', '.join(map(str, f.replicas)))}</td><td>{escape(', '.join(f.devices))}</td>"
                    f"<td>{escape(f.message)}</td><td>{escape(f.fix)}</td></tr>")
    rows.append("</table>")
    parts = ["<!DOCTYPE html><html lang=en><head><meta charset=utf-8>",
             f"<title>dp-compare doctor: {escape(report.target)}</title><style>{CSS}</style></head><body>",
             f"<h1>dp-compare doctor: {escape(report.target)} — {status}</h1>",
             f"<p>{escape(headline(report))}.</p>",
             *(rows if report.findings else []),
             *(f"<p>note: {escape(note)}</p>" for note in report.notes),
             "</body></html>"]
    return "\n".join(parts)


RENDERERS.update(table=to_table, json=DoctorReport.to_json, html=to_html)
FORMATS = tuple(RENDERERS)
