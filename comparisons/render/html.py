"""A self-contained HTML report, answer first: the summary (render/sections.py), the per-layer table when
there is one, per backend a device x tensor grid, and the full check table folded.

Inline CSS and an inline SVG chart only (no scripts, fonts or image files), so the file opens anywhere,
offline. At 700-1400 px the wide tables scroll inside their own box, numbers and device cells do not
wrap, multi-line notes keep their lines, and the chart scales to its box.
"""
from __future__ import annotations

from html import escape

from comparisons.judge import layer_of
from comparisons.placement import PlacementMap
from comparisons.render.bench import bench_html
from comparisons.render.layers import layer_section_html
from comparisons.render.rows import aligned_rows
from comparisons.render.sections import summary_section
from comparisons.render.text import format_number, headline, leaf_lines, tolerance_words, verdict, worst_leaf
from comparisons.verdicts import ComparisonReport

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
.grid td.path{font-family:monospace;white-space:nowrap} .grid colgroup.backend{border-left:3px solid #777}
.grid th.group{text-align:center;font-size:13px} .grid td.cell{text-align:center;min-width:54px}
.grid td.empty{background:#fafafa}
.alias{font-weight:700;color:#7a0019} .legend span{display:inline-block;padding:2px 8px;margin:2px}
.role{color:#666;font-size:11px}
.scroll{overflow-x:auto;max-width:100%} .scroll>table{margin:0}
td.num,th.dev,.grid td.cell,.grid th.group{white-space:nowrap}
p.note,td.detail{white-space:pre-line}
.why{color:#666;font-style:italic;font-family:system-ui,sans-serif;white-space:normal}
.summary{border:1px solid #ddd;border-radius:6px;padding:4px 14px 10px;max-width:900px}
.summary h2{margin-top:8px} ul.failures{margin:4px 0;padding-left:20px} code{overflow-wrap:anywhere}
figure.chart{margin:8px 0;max-width:760px} figure.chart svg{display:block;width:100%;height:auto}
figcaption{color:#666;font-size:12px} details.checks>summary{cursor:pointer;font-size:16px;font-weight:600;
margin:24px 0 8px}
"""


def render_html(report: ComparisonReport) -> str:
    """The whole report as one HTML document (a string), the answer first: the summary (verdict, first
    divergence, drift chart), the per-layer table when there is one, the placement grid, the notes, and
    last the full check table, folded. Draws the drift chart (matplotlib) when the report has a drift."""
    status = ("<span class=ok>OK</span>" if report.ok else "<span class=bad>FAILED</span>")
    passed = len(report.checks) - len(report.failures)
    parts = [
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>",
        "<meta name=viewport content='width=device-width, initial-scale=1'>",
        f"<title>dp-compare: {escape(report.model)}</title><style>{CSS}</style></head><body>",
        f"<h1>dp-compare: {escape(report.model)} — {status}</h1>",
        f"<p>{escape(headline(report))}.<br>Tolerance ({escape(report.dtype)}, each leaf on its own, "
        f"|Δ| ≤ atol + rtol·|b|): {escape(tolerance_words(report))}.</p>",
        summary_section(report), bench_html(report), layer_section_html(report),
        "<h2>Placement: device × tensor</h2>", _legend(report), _scroll(_grids(report)), _process_grids(report),
        *(["<h2>Notes</h2>"] if report.notes else []),
        *(f"<p class=note>note: {escape(note)}</p>" for note in report.notes),
        f"<details class=checks><summary>All checks: {passed}/{len(report.checks)} passed</summary>",
        _scroll(_check_table(report)), "</details>",
        "</body></html>",
    ]
    return "\n".join(part for part in parts if part)


def _check_table(report: ComparisonReport) -> str:
    rows = ["<table><tr><th>check</th><th>compared</th><th>max |Δ|</th><th>rel ‖Δ‖</th>"
            "<th>tol</th><th>verdict</th><th>worst leaf</th><th>detail</th></tr>"]
    for check in report.checks:
        css = "bad" if not check.passed else "ok"
        rows.append(
            f"<tr class={'fail' if not check.passed else 'pass'}><td>{escape(check.subject)}</td>"
            f"<td>{escape(check.compared)}</td><td class=num>{format_number(check.max_abs)}</td>"
            f"<td class=num>{format_number(check.rel_norm)}</td>"
            f"<td class=num>{format_number(check.tolerance)}</td>"
            f"<td class={css}>{verdict(check)}{escape(f' ({check.cause})' if check.cause else '')}</td>"
            f"<td>{escape(worst_leaf(check))}</td><td class=detail>{escape(check.detail)}{_leaf_list(check)}</td></tr>")
    return "\n".join(rows + ["</table>"])


def _leaf_list(check) -> str:
    """Every failing leaf of a check, one list item each, with its cause."""
    lines = leaf_lines(check)
    return "<ul>" + "".join(f"<li>{escape(line.strip()[2:])}</li>" for line in lines) + "</ul>" if lines else ""


def _scroll(table: str) -> str:
    """A box the table scrolls in sideways, so a wide table does not widen the page."""
    return f"<div class=scroll>{table}</div>"


def _legend(report: ComparisonReport) -> str:
    spans = "".join(f"<span style='background:{PALETTE[i % len(PALETTE)]}'>device {i}</span>"
                    for i in range(report.devices))
    return (f"<p class=legend>One row per tensor: torch's on the left, its Flax counterpart beside it "
            f"(tensors with no single counterpart follow their layer), then where each JAX strategy "
            f"puts it. Columns are logical devices "
            f"(positions in each backend's device list). {spans} Cells name the replica (r0, r1, …; "
            f"‘global’ for the original or gathered value) and the shape; "
            f"<span class=alias>≡</span> marks memory shared with the original (replica 0 should, the "
            f"others should not). A mapped strategy's padded chunk shows its padding rows; 'pmap' "
            f"and 'sharded' chunks keep a leading replica axis of size 1.</p>")


def _grids(report: ComparisonReport) -> str:
    """One table: torch's tensor and devices, then the Flax tensor beside it and each strategy's devices."""
    torch_map = report.placements.get("torch", PlacementMap(()))
    jax_labels = [label for label in report.placements if label != "torch"]
    torch_grid = _every_device(torch_map.grid(), _device_count(torch_map, report.devices))
    jax_grids = [_every_device(report.placements[label].grid(), _device_count(report.placements[label], report.devices))
                 for label in jax_labels]
    spans = [len(torch_grid[0]) + 1] + [len(grid[0]) + (i == 0) for i, grid in enumerate(jax_grids)]
    groups = "".join(f"<colgroup span={span} class=backend></colgroup>" for span in spans)
    top = "".join(f"<th class=group colspan={span}>{escape(label)}</th>"
                  for label, span in zip(["torch", *jax_labels], spans))
    sub = ("<th class=path>tensor</th>" + _column_heads(torch_grid[0])
           + "".join(("<th class=path>Flax tensor</th>" if i == 0 else "") + _column_heads(grid[0])
                     for i, grid in enumerate(jax_grids)))
    lines = [f"<table class=grid>{groups}<tr>{top}</tr><tr>{sub}</tr>"]
    jax_maps = [report.placements[label] for label in jax_labels]
    for torch_key, flax_key in aligned_rows(torch_map, jax_maps, report.layers):
        why = _why_blank(torch_key, flax_key, report.layers)
        cells = _name_cell(torch_key, why) + _device_cells(torch_grid, torch_key)
        for i, grid in enumerate(jax_grids):
            cells += (_name_cell(flax_key, why) if i == 0 else "") + _device_cells(grid, flax_key)
        lines.append(f"<tr>{cells}</tr>")
    return "\n".join(lines + ["</table>"])


def _device_count(placement: PlacementMap, devices: int) -> int:
    """The logical devices a backend's columns span: the report's `devices`, except in a multi-process run,
    where each backend has its own (DDP's P ranks beside JAX's P x D devices): those its records name."""
    if any(r.process is not None for r in placement):
        return len({r.logical_index for r in placement if r.logical_index is not None})
    return devices


def _every_device(grid: tuple, devices: int) -> tuple:
    """The grid with a column for each of the `devices` logical devices, even one holding nothing."""
    columns, tensors, cells = grid
    missing = [(i, "") for i in range(devices) if i not in {index for index, _ in columns}]
    ordered = sorted(columns + missing, key=lambda c: (c[0] is None, c[0] or 0, c[1]))
    return ordered, tensors, cells


def _column_heads(columns: list) -> str:
    return "".join(f"<th class=dev>{'—' if i is None else i}<br><span class=role>{escape(device)}</span></th>"
                   for i, device in columns)


def _name_cell(key: tuple[str, str] | None, why: str = "") -> str:
    if key is None:
        return f"<td class='path gap'><span class=why>{escape(why)}</span></td>"
    role, path = key
    return f"<td class=path><span class=role>{escape(role)}</span> {escape(path)}</td>"


def _why_blank(torch_key, flax_key, layers: dict[str, str]) -> str:
    """Why a row has no tensor on one side: the conversion splits one torch tensor into several Flax
    ones (an MHA's in_proj into query/key/value, an LSTM's stacked gates), or there is none."""
    if torch_key is not None and flax_key is not None:
        return ""
    if flax_key is None:
        layer = layer_of(torch_key[1], layers)
        if layer is not None and layer != torch_key[1]:
            return f"converted into other Flax tensors of {layers[layer]}"
        return "no Flax counterpart"
    flax_layer = layer_of(flax_key[1].split(".", 1)[-1], layers.values())  # path without its collection
    torch_layer = next((t for t, f in layers.items() if f == flax_layer), None)
    if torch_layer is not None:
        return f"made from torch tensors of {torch_layer}"
    return "no torch counterpart"


def _device_cells(grid: tuple, key: tuple[str, str] | None) -> str:
    columns, _, cells = grid
    if key is None:
        return "<td class='cell empty'></td>" * len(columns)
    return "".join(_cell(cells.get((i, device, *key), []), i) for i, device in columns)


def _cell(records: list, index: int | None) -> str:
    if not records:
        return "<td class='cell empty'></td>"
    labels = []
    for record in records:
        replica = "global" if record.replica is None else f"r{record.replica}"
        alias = " <span class=alias>≡</span>" if record.aliases_original else ""
        shape = "×".join(map(str, record.shape)) or "scalar"
        labels.append(f"{replica}{alias}<br><span class=role>{shape}</span>")
    colour = "#e0e0e0" if index is None else PALETTE[index % len(PALETTE)]
    return f"<td class=cell style='background:{colour}'>{'<br>'.join(labels)}</td>"


def _process_grids(report: ComparisonReport) -> str:
    """Multi-process runs: per backend, one column per (process, device), one row per tensor; else ''."""
    parts = []
    for label, placement in report.placements.items():
        records = [r for r in placement if r.process is not None]
        if not records:
            continue
        columns = sorted({(r.process, r.device, r.logical_index) for r in records}, key=lambda c: (c[0], c[2] or 0))
        cells = {(r.process, r.device, r.role, r.path): r for r in records}
        heads = "".join(f"<th class=dev>process {p}<br><span class=role>{escape(d)}</span></th>" for p, d, _ in columns)
        rows = [f"<table class=grid><tr><th class=path>tensor</th>{heads}</tr>"]
        for role, path in dict.fromkeys((r.role, r.path) for r in records):
            row = "".join(_process_cell(cells.get((p, d, role, path)), p) for p, d, _ in columns)
            rows.append(f"<tr>{_name_cell((role, path))}{row}</tr>")
        parts += [f"<h2>Placement: process × device ({escape(label)})</h2>", *rows, "</table>"]
    return "\n".join(parts)


def _process_cell(record, process: int) -> str:
    if record is None:
        return "<td class='cell empty'></td>"
    shape = "×".join(map(str, record.shape)) or "scalar"
    return f"<td class=cell style='background:{PALETTE[process % len(PALETTE)]}'>{shape}</td>"
