"""ComparisonReport renderings: table, JSON schema, Markdown, self-contained HTML with the placement grid."""
from __future__ import annotations

import json
import re

import pytest
from _helpers_harness import small_report

from comparisons.report import SCHEMA_VERSION

TOP_LEVEL = {"schema_version", "model", "batch_size", "devices", "chunk_sizes", "strategies", "steps",
             "optimizer", "dtype", "seed", "torch_devices", "tolerance", "ok", "checks", "placements", "notes",
             "layers"}
CHECK_FIELDS = {"subject", "compared", "passed", "max_abs", "rel_norm", "tolerance", "detail"}
RECORD_FIELDS = {"replica", "path", "role", "device", "logical_index", "shape", "dtype", "aliases_original"}


@pytest.mark.parametrize("passed", [True, False])
def test_json_follows_the_documented_schema(passed):
    data = json.loads(small_report(passed).render("json"))
    assert set(data) == TOP_LEVEL
    assert data["schema_version"] == SCHEMA_VERSION
    assert data["ok"] is passed
    assert all(set(check) == CHECK_FIELDS for check in data["checks"])
    rows = [row for rows in data["placements"].values() for row in rows]
    assert rows and all(set(row) == RECORD_FIELDS for row in rows)
    assert data["placements"]["torch"][1]["shape"] == [4, 3]


def test_the_schema_document_lists_every_json_field():
    from _helpers_harness import ROOT

    text = (ROOT / "docs" / "report_schema.md").read_text()
    for field in TOP_LEVEL | CHECK_FIELDS | RECORD_FIELDS:
        assert f"`{field}`" in text, field


def test_table_shows_each_check_and_the_summary():
    text = small_report(passed=False).render("table")
    assert "torch DP vs jax:explicit DP" in text
    assert re.search(r"gradients .* 3\.00e-03 .* FAIL", text)
    assert "1/2 checks passed" in text
    assert "FAIL gradients (torch DP vs jax:explicit DP): worst leaf fc.kernel <b>" in text


def test_markdown_has_a_row_per_check_and_the_verdict():
    text = small_report(passed=False).render("markdown")
    rows = [line for line in text.splitlines() if line.startswith("| ") and ("PASS" in line or "FAIL" in line)]
    assert [row.split(" | ")[0] for row in rows] == ["| outputs", "| gradients"]
    assert "**FAILED**: 1/2 checks passed." in text


def test_html_is_self_contained_and_escapes_details():
    html = small_report(passed=False).render("html")
    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")
    for external in ("http://", "https://", "<script", "<link", "src=", "url("):
        assert external not in html
    assert "worst leaf fc.kernel &lt;b&gt;" in html
    assert "<tr class=fail>" in html and "FAILED" in html


def test_html_puts_each_backend_in_a_column_group_with_device_colours_and_aliasing():
    html = small_report().render("html")
    groups = re.findall(r"<th class=group colspan=(\d+)>(.*?)</th>", html)
    assert groups == [("3", "torch"), ("3", "jax:explicit")]  # tensor name + 2 devices each
    cells = re.findall(r"<td class=cell style='background:(#[0-9a-f]{6})'>(r\d)( <span class=alias>≡</span>)?",
                       html)
    assert [(replica, bool(alias)) for _, replica, alias in cells] == [
        ("r0", True), ("r1", False), ("r0", True), ("r1", False)]
    colours = {replica: colour for colour, replica, _ in cells}
    assert colours["r0"] != colours["r1"]


def test_html_row_holds_the_torch_tensor_beside_its_flax_counterpart():
    html = small_report().render("html")
    row = next(line for line in html.splitlines() if "fc.weight" in line)
    assert "params.fc.kernel" in row


def test_headline_names_the_torch_device_kind():
    report = small_report()
    assert "torch on the CPU (repeated 2x)" in report.render("markdown")
    report.torch_devices = "virtual"
    assert "torch on virtual devices vdev:0..1" in report.render("table")


def test_unknown_format_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="format 'pdf' is unknown; use one of table, json, markdown, html"):
        small_report().render("pdf")


def test_rows_pair_torch_tensors_with_flax_ones_and_keep_leftovers_by_their_layer():
    from comparisons.placement import PlacementMap, PlacementRecord
    from comparisons.render.rows import aligned_rows

    def placement(*keys):
        return PlacementMap(tuple(PlacementRecord(0, path, role, "cpu", 0, (2,), "float32") for role, path in keys))

    torch_map = placement(("param", "attn.in_proj_weight"), ("param", "attn.out_proj.weight"),
                          ("buffer", "bn.running_mean"), ("buffer", "bn.num_batches_tracked"), ("input", "args[0]"))
    jax_map = placement(("param", "params.extra.kernel"), ("buffer", "batch_stats.bn.mean"),
                        ("param", "params.attn.query.kernel"), ("param", "params.attn.out.kernel"),
                        ("input", "args[0]"))
    rows = aligned_rows(torch_map, [jax_map], {"attn": "attn", "bn": "bn"})
    assert rows == [
        (("param", "attn.in_proj_weight"), None),
        (("param", "attn.out_proj.weight"), ("param", "params.attn.out.kernel")),
        (None, ("param", "params.attn.query.kernel")),  # no single torch counterpart: after its layer
        (("buffer", "bn.running_mean"), ("buffer", "batch_stats.bn.mean")),
        (("buffer", "bn.num_batches_tracked"), None),
        (("input", "args[0]"), ("input", "args[0]")),
        (None, ("param", "params.extra.kernel")),  # no layer in the mapping: last
    ]
