"""The HTML report at 700-1400 px: the answer first (summary, drift chart, layer slot, grid, folded checks), wide
tables scroll in their own box, numbers stay on one line, notes keep their lines, the chart fits its box, and a
blank counterpart says why it is blank. Measured in headless Chromium when it is installed; the CSS and
structure are checked without it."""
from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess

import numpy as np
import pytest
from _helpers_harness import small_report

from comparisons.placement import PlacementMap, PlacementRecord
from comparisons.verdicts import Check

DEVICES = 8
STRATEGIES = ("explicit", "pmap", "sharded", "shard_map")
NOTE = "jax:pmap pads the last chunk: replica 0 on cpu:0: rows 0..2\nreplica 1 on cpu:1: rows 3..5\nreplica 2: 6..6"


def drawn_drift(seed: int, steps: int = 12) -> list[dict]:
    """A drift of `steps` entries with gaps drawn around rounding's size, each quantity its own."""
    rng = np.random.default_rng(seed)
    entries = []
    for step in range(1, steps + 1):
        gaps = {q: float(10 ** rng.uniform(-8, -6)) * step for q in ("loss", "gradients", "params")}
        entries.append({"step": step, **gaps, "worst": max(gaps.values()), "strategy": "jax:pmap",
                        "float64": float(10 ** rng.uniform(-16, -15))})
    return entries


def wide_report():
    """8 devices and 4 strategies (a grid far wider than 1000 px), an MHA whose in_proj Flax splits in three,
    and a 12-step drift."""
    torch_records = [PlacementRecord(i, path, "param", f"vdev:{i}", i, shape, "float32", i == 0)
                     for i in range(DEVICES)
                     for path, shape in (("attn.in_proj_weight", (48, 16)), ("attn.out_proj.weight", (16, 16)))]
    placements = {"torch": PlacementMap(tuple(torch_records))}
    for strategy in STRATEGIES:
        placements[f"jax:{strategy}"] = PlacementMap(tuple(
            PlacementRecord(i, f"params.attn.{name}.kernel", "param", f"cpu:{i}", i, (16, 4, 4), "float32", i == 0)
            for i in range(DEVICES) for name in ("query", "key", "value", "out")))
    checks = [Check("gradients", f"torch DP vs jax:{s} DP", True, 1.234e-7, 5.678e-8, 1e-5, "worst leaf attn")
              for s in STRATEGIES]
    return dataclasses.replace(small_report(), devices=DEVICES, strategies=list(STRATEGIES), checks=checks,
                               placements=placements, notes=[NOTE], layers={"attn": "attn"},
                               chunk_sizes=[3] * 7 + [1], batch_size=22, drift=drawn_drift(0))


def test_css_and_structure_scroll_the_tables_keep_numbers_whole_and_notes_on_their_lines():
    html = wide_report().render("html")
    css = re.search(r"<style>(.*?)</style>", html, re.S).group(1)
    assert ".scroll{overflow-x:auto;max-width:100%}" in css
    assert re.search(r"td\.num,[^{]*\{white-space:nowrap\}", css)
    assert re.search(r"p\.note,td\.detail\{white-space:pre-line\}", css)
    assert "<div class=scroll><table class=grid>" in html and "<div class=scroll><table><tr><th>check</th>" in html
    assert "<p class=note>note: " + NOTE in html  # the newlines themselves are kept
    assert html.count("<td class=num>") == 3 * len(STRATEGIES)


def test_a_blank_counterpart_says_why_it_is_blank():
    html = wide_report().render("html")
    rows = [line for line in html.splitlines() if line.startswith("<tr><td")]
    in_proj = next(row for row in rows if "attn.in_proj_weight" in row)
    assert "<span class=why>converted into other Flax tensors of attn</span>" in in_proj
    query = next(row for row in rows if "params.attn.query.kernel" in row)
    assert "<span class=why>made from torch tensors of attn</span>" in query
    out = next(row for row in rows if "attn.out_proj.weight" in row)
    assert "class=why" not in out  # a row with both sides says nothing


MEASURE = """<script>
addEventListener('load', () => {
  document.querySelectorAll('details').forEach(d => { d.open = true; });  // measure the folded table too
  const px = e => e.getBoundingClientRect();
  const boxes = [...document.querySelectorAll('.scroll')];
  const grid = document.querySelector('table.grid').parentElement;
  const chart = document.querySelector('figure.chart svg');
  const top = s => px(document.querySelector(s)).top;
  const nums = [...document.querySelectorAll('td.num, .grid td.cell')];
  const lineHeight = parseFloat(getComputedStyle(document.querySelector('td.num')).lineHeight);
  const note = [...document.querySelectorAll('p')].find(p => p.textContent.startsWith('note: jax:pmap'));
  document.body.insertAdjacentHTML('beforeend', '<pre id=measured>' + JSON.stringify({
    page: document.documentElement.scrollWidth, viewport: document.documentElement.clientWidth,
    box_overflows: boxes.map(b => b.scrollWidth > b.clientWidth + 1),
    grid_overflows: grid.scrollWidth > grid.clientWidth + 1,
    chart_width: px(chart).width, chart_right: px(chart).right, chart_height: px(chart).height,
    order: ['.summary', 'figure.chart', 'table.grid', 'details.checks'].map(top),
    box_within_page: boxes.map(b => px(b).right <= document.documentElement.clientWidth + 1),
    tallest_number: Math.max(...[...document.querySelectorAll('td.num')].map(td => px(td).height)),
    line_height: lineHeight, note_lines: note.innerText.split('\\n').length,
    cells_wrapped: nums.filter(td => td.innerText.split('\\n').some(l => l.length) &&
                                     td.scrollWidth > td.clientWidth + 1).length,
  }) + '</pre>');
});
</script>"""


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed (apt-get install chromium)")
@pytest.mark.parametrize("width", [700, 1000, 1400])
def test_in_a_real_browser_the_page_does_not_scroll_sideways_but_the_tables_do(tmp_path, width):
    page = tmp_path / "report.html"
    page.write_text(wide_report().render("html").replace("</body>", MEASURE + "</body>"))
    done = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", f"--window-size={width},900",
                           "--virtual-time-budget=2000", "--dump-dom", page.as_uri()],
                          capture_output=True, text=True, timeout=120)
    found = re.search(r'<pre id="measured">(.*?)</pre>', done.stdout, re.S)  # the DOM's, not the script's
    assert found, done.stderr[-2000:]
    measured = json.loads(found.group(1))
    assert measured["page"] <= measured["viewport"], measured  # nothing pokes out of the page
    assert measured["grid_overflows"] and all(measured["box_within_page"]), measured  # the grid scrolls in its box
    assert measured["order"] == sorted(measured["order"]), measured  # summary, chart, grid, then the checks
    assert measured["chart_right"] <= measured["viewport"] and measured["chart_width"] >= min(600, width - 80), \
        measured  # the chart fits and stays readable: most of a narrow page, its full size on a wide one
    assert 0.3 < measured["chart_height"] / measured["chart_width"] < 0.7, measured  # scaled, not squashed
    assert measured["tallest_number"] < 2 * measured["line_height"] + 8, measured  # no number wraps
    assert measured["note_lines"] == NOTE.count("\n") + 1, measured
    assert measured["cells_wrapped"] == 0, measured


@pytest.mark.parametrize("processes, devices", [(2, 2), (3, 2), (2, 3)])
def test_a_multi_process_grid_gives_each_backend_only_its_own_devices(processes, devices):
    # DDP: one rank per process, on "cpu"; JAX: processes x devices, as compare_distributed records them
    ddp = [PlacementRecord(rank, "fc.weight", "param", "cpu", rank, (3, 4), "float32", None, rank)
           for rank in range(processes)]
    mesh = [PlacementRecord(i, "params.fc.kernel", "param", f"cpu:{i}", i, (4, 3), "float32", None, i // devices)
            for i in range(processes * devices)]
    report = dataclasses.replace(small_report(), devices=processes * devices, layers={"fc": "fc"},
                                 placements={"torch": PlacementMap(tuple(ddp)),
                                             "jax:multi-process": PlacementMap(tuple(mesh))})
    page = report.render("html")
    grid = page[page.index("<h2>Placement: device × tensor</h2>"):page.index("Placement: process × device")]
    spans = [int(n) for n in re.findall(r"<colgroup span=(\d+) class=backend>", grid)]
    assert spans == [processes + 1, processes * devices + 1]  # each: its device columns and a tensor column
    row = grid[grid.index("fc.weight"):].split("</tr>", 1)[0]
    assert row.count("<td class=cell") == processes + processes * devices  # every column holds the tensor
