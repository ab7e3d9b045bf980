"""A self-contained HTML report: the check table and, per backend, a device x tensor grid.

Inline CSS only (no scripts, fonts or images), so the file opens anywhere, offline.
"""
from __future__ import annotations

from html import escape

from comparisons.placement import PlacementMap
from comparisons.report import ComparisonReport, format_number, headline, verdict

# One colour per logical device index (colour-blind-friendly Okabe-Ito tones, light variants).
PALETTE = ("#cfe8ff", "#ffe1b3", "#c9f0dd", "#f9d0e6", "#fff3a6", "#d9d2f5", "#ffd3c4", "#d4e9c7")

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:24px 0 8px}
.ok{color:#0a7a32;font-weight:600} .bad{color:#b00020;font-weight:600}
table{border-collapse:collapse;margin:4px 0}
th,td{border:1px solid #ccc;padding:3px 6px;font-size:12px;vertical-align:top}
th{background:#f3f3f3;text-align:left} td.num{text-align:right;font-family:monospace}
tr.fail td{background:#fde7ea}
.grids{display:flex;flex-wrap:wrap;gap:24px;align-items:flex-start}
.grid td.path{font-family:monospace;white-space:nowrap} .grid td.cell{text-align:center;min-width:54px}
.grid td.empty{background:#fafafa}
.alias{font-weight:700;color:#7a0019} .legend span{display:inline-block;padding:2px 8px;margin:2px}
.role{color:#666;font-size:11px}
"""


def render_html(report: ComparisonReport) -> str:
    """The whole report as one HTML document (a string)."""
    status = ("<span class=ok>OK</span>" if report.ok else "<span class=bad>FAILED</span>")
    parts = [
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>",
        f"<title>dp-compare: {escape(report.model)}</title><style>{CSS}</style></head><body>",
        f"<h1>dp-compare: {escape(report.model)} — {status}</h1>",
        f"<p>{escape(headline(report))}.<br>Tolerance ({escape(report.dtype)}): max |Δ| ≤ "
        f"{report.tolerance['max_abs']:.0e} or rel ‖Δ‖ ≤ {report.tolerance['rel_norm']:.0e}. "
        f"{len(report.checks) - len(report.failures)}/{len(report.checks)} checks passed.</p>",
        *(f"<p>note: {escape(note)}</p>" for note in report.notes),
        "<h2>Checks</h2>", _check_table(report),
        "<h2>Placement: device × tensor</h2>", _legend(report), _grids(report),
        "</body></html>",
    ]
    return "\n".join(parts)


def _check_table(report: ComparisonReport) -> str:
    rows = ["<table><tr><th>check</th><th>compared</th><th>max |Δ|</th><th>rel ‖Δ‖</th>"
            "<th>tol</th><th>verdict</th><th>detail</th></tr>"]
    for check in report.checks:
        css = "bad" if not check.passed else "ok"
        rows.append(
            f"<tr class={'fail' if not check.passed else 'pass'}><td>{escape(check.subject)}</td>"
            f"<td>{escape(check.compared)}</td><td class=num>{format_number(check.max_abs)}</td>"
            f"<td class=num>{format_number(check.rel_norm)}</td>"
            f"<td class=num>{format_number(check.tolerance)}</td>"
            f"<td class={css}>{verdict(check)}</td><td>{escape(check.detail)}</td></tr>")
    return "\n".join(rows + ["</table>"])


def _legend(report: ComparisonReport) -> str:
    spans = "".join(f"<span style='background:{PALETTE[i % len(PALETTE)]}'>device {i}</span>"
                    for i in range(report.devices))
    return (f"<p class=legend>Columns are logical devices (positions in the device list). "
            f"{spans} Cells name the replica (r0, r1, …; ‘global’ for the original or gathered "
            f"value) and the shape; <span class=alias>≡</span> marks memory shared with the "
            f"original (replica 0 should, the others should not).</p>")


def _grids(report: ComparisonReport) -> str:
    grids = [_grid(name, placement) for name, placement in report.placements.items()]
    return "<div class=grids>" + "\n".join(grids) + "</div>"


def _grid(name: str, placement: PlacementMap) -> str:
    columns, tensors, cells = placement.grid()
    header = "".join(f"<th>{'—' if i is None else i}<br><span class=role>{escape(device)}</span></th>"
                     for i, device in columns)
    rows = [f"<table class=grid><caption><b>{escape(name)}</b></caption>"
            f"<tr><th>tensor</th>{header}</tr>"]
    for role, path in tensors:
        row = "".join(_cell(cells.get((i, device, role, path), []), i) for i, device in columns)
        rows.append(f"<tr><td class=path><span class=role>{escape(role)}</span> {escape(path)}</td>{row}</tr>")
    return "\n".join(rows + ["</table>"])


def _cell(records: list, index: int | None) -> str:
    if not records:
        return "<td class='cell empty'></td>"
    labels = []
    for record in records:
        who = "global" if record.replica is None else f"r{record.replica}"
        alias = " <span class=alias>≡</span>" if record.aliases_original else ""
        shape = "×".join(map(str, record.shape)) or "scalar"
        labels.append(f"{who}{alias}<br><span class=role>{shape}</span>")
    colour = "#e0e0e0" if index is None else PALETTE[index % len(PALETTE)]
    return f"<td class=cell style='background:{colour}'>{'<br>'.join(labels)}</td>"
