"""ComparisonReport renderings: table, JSON schema, Markdown, self-contained HTML with the placement grid."""
from __future__ import annotations

import json
import re

import pytest
from _helpers_harness import small_report
from hypothesis import given, settings
from hypothesis import strategies as st

from comparisons.verdicts import SCHEMA_VERSION

TOP_LEVEL = {"schema_version", "model", "batch_size", "devices", "chunk_sizes", "strategies", "steps",
             "optimizer", "dtype", "seed", "torch_devices", "tolerance", "ok", "checks", "placements", "notes",
             "layers", "precision", "drift", "layer_view", "first_divergence",
             "replica_divergences", "bench", "flax"}
DRIFT_FIELDS = {"step", "loss", "gradients", "params", "worst", "strategy", "float64"}
CHECK_FIELDS = {"subject", "compared", "passed", "max_abs", "rel_norm", "tolerance", "detail", "leaves", "cause"}
LEAF_FIELDS = {"path", "max_abs", "rel", "passed", "cause", "kind", "atol", "message"}
TOLERANCE_FIELDS = {"rtol", "rtol_source", "atol", "atol_source", "float64_rtol"}
RECORD_FIELDS = {"replica", "path", "role", "device", "logical_index", "shape", "dtype", "aliases_original"}
SEEDS = st.integers(0, 2**32 - 1)
drawn = settings(max_examples=8, deadline=None)


@drawn
@given(seed=SEEDS, passed=st.booleans())
def test_json_follows_the_documented_schema(seed, passed):
    report = small_report(passed, seed)
    data = json.loads(report.render("json"))
    assert set(data) == TOP_LEVEL
    assert data["schema_version"] == SCHEMA_VERSION
    assert data["ok"] is passed
    assert all(set(check) == CHECK_FIELDS for check in data["checks"])
    assert [c["subject"] for c in data["checks"]] == [c.subject for c in report.checks]
    assert all(set(leaf) == LEAF_FIELDS for check in data["checks"] for leaf in check["leaves"])
    assert set(data["tolerance"]) == TOLERANCE_FIELDS
    if not passed:
        failing = next(c for c in data["checks"] if not c["passed"])
        assert failing["cause"] == "port" and [leaf["passed"] for leaf in failing["leaves"]] == [False, True]
    rows = [row for rows in data["placements"].values() for row in rows]
    assert rows and all(set(row) == RECORD_FIELDS for row in rows)
    torch_records = report.placements["torch"].records
    assert [row["shape"] for row in data["placements"]["torch"]] == [list(r.shape) for r in torch_records]
    assert data["chunk_sizes"] == report.chunk_sizes and sum(data["chunk_sizes"]) == data["batch_size"]


def test_the_schema_document_lists_every_json_field():
    from _helpers_harness import ROOT

    text = (ROOT / "docs" / "report_schema.md").read_text()
    for field in TOP_LEVEL | CHECK_FIELDS | RECORD_FIELDS | LEAF_FIELDS | TOLERANCE_FIELDS | DRIFT_FIELDS:
        assert f"`{field}`" in text, field


def _failing(report):
    return next(c for c in report.checks if not c.passed)


@drawn
@given(seed=SEEDS)
def test_table_shows_each_check_and_the_summary(seed):
    report = small_report(passed=False, seed=seed)
    text = report.render("table")
    wrong = _failing(report)
    assert "torch DP vs jax:explicit DP" in text
    assert re.search(rf"^│ FAIL +│ gradients .* {wrong.max_abs:.2e} ", text, re.M)  # the verdict first
    assert f"{len(report.checks) - 1}/{len(report.checks)} checks passed" in text
    layer = next(iter(report.layers))
    assert "FAIL gradients (torch DP vs jax:explicit DP) [port]: 1 of 2 leaves fail\n" in text
    assert re.search(rf"^  - port: `{layer}.kernel`: \|Δ\| .* <b> \[port\]$", text, re.M)  # each failing leaf
    assert re.search(rf"^│ port +│ +│ └ {layer}\.kernel +│", text, re.M)  # a row under the check per failing leaf
    assert f"└ {layer}.bias ≤ atol 1e-06" in text  # a passing check: its worst leaf, beside its bound
    assert "rtol 1e-05 (default for float32); atol derived per leaf" in text


@drawn
@given(seed=SEEDS)
def test_markdown_has_a_row_per_check_and_the_verdict(seed):
    report = small_report(passed=False, seed=seed)
    text = report.render("markdown")
    rows = [line for line in text.splitlines() if line.startswith("| ") and ("PASS" in line or "FAIL" in line)]
    assert [row.split(" | ")[0] for row in rows] == [f"| {c.subject}" for c in report.checks]
    assert f"**FAILED**: {len(report.checks) - 1}/{len(report.checks)} checks passed." in text
    assert "Failing leaves of gradients (torch DP vs jax:explicit DP), cause port:" in text
    assert f"  - port: `{next(iter(report.layers))}.kernel`" in text


@drawn
@given(seed=SEEDS)
def test_html_is_self_contained_and_escapes_details(seed):
    report = small_report(passed=False, seed=seed)
    html = report.render("html")
    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")
    for external in ("http://", "https://", "<script", "<link", "src=", "url("):
        assert external not in html
    assert f"<li>port: `{next(iter(report.layers))}.kernel`: |Δ| " in html and "&lt;b&gt; [port]</li>" in html
    assert html.count("<tr class=fail>") == 1 and "FAILED" in html


@drawn
@given(seed=SEEDS)
def test_html_puts_each_backend_in_a_column_group_with_device_colours_and_aliasing(seed):
    report = small_report(seed=seed)
    n = report.devices
    html = report.render("html")
    groups = re.findall(r"<th class=group colspan=(\d+)>(.*?)</th>", html)
    assert groups == [(str(n + 1), "torch"), (str(n + 1), "jax:explicit")]  # tensor name + a column per device
    cells = re.findall(r"<td class=cell style='background:(#[0-9a-f]{6})'>(r\d)( <span class=alias>≡</span>)?",
                       html)
    expected = [(f"r{i}", i == 0) for i in range(n)]
    assert [(replica, bool(alias)) for _, replica, alias in cells] == expected + expected
    colours = {replica: colour for colour, replica, _ in cells}
    assert len(set(colours.values())) == n  # one colour per device


@drawn
@given(seed=SEEDS)
def test_html_row_holds_the_torch_tensor_beside_its_flax_counterpart(seed):
    report = small_report(seed=seed)
    layer = next(iter(report.layers))
    row = next(line for line in report.render("html").splitlines() if f"{layer}.weight" in line)
    assert f"params.{layer}.kernel" in row


@drawn
@given(seed=SEEDS)
def test_headline_names_the_torch_device_kind(seed):
    report = small_report(seed=seed)
    n = report.devices
    assert f"torch on the CPU (repeated {n}x)" in report.render("markdown")
    report.torch_devices = "virtual"
    assert f"torch on virtual devices vdev:0..{n - 1}" in report.render("table")


def test_unknown_format_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="format 'pdf' is unknown; use one of table, json, markdown, html"):
        small_report().render("pdf")


def test_rows_pair_torch_tensors_with_flax_ones_and_keep_leftovers_by_their_layer():
    from comparisons.placement import PlacementMap, PlacementRecord
    from comparisons.render.rows import aligned_rows

    def placement(*keys):
        return PlacementMap(tuple(PlacementRecord(0, path, role, "cpu", 0, (2,), "float32") for role, path in keys))

    torch_map = placement(("param", "attn.in_proj_weight"), ("param", "attn.out_proj.weight"),
                          ("buffer", "bn.running_mean"), ("buffer", "bn.num_batches_tracked"), ("input", "args.0"))
    jax_map = placement(("param", "params.extra.kernel"), ("buffer", "batch_stats.bn.mean"),
                        ("param", "params.attn.query.kernel"), ("param", "params.attn.out.kernel"),
                        ("input", "args.0"))
    rows = aligned_rows(torch_map, [jax_map], {"attn": "attn", "bn": "bn"})
    assert rows == [
        (("param", "attn.in_proj_weight"), None),
        (("param", "attn.out_proj.weight"), ("param", "params.attn.out.kernel")),
        (None, ("param", "params.attn.query.kernel")),  # no single torch counterpart: after its layer
        (("buffer", "bn.running_mean"), ("buffer", "batch_stats.bn.mean")),
        (("buffer", "bn.num_batches_tracked"), None),
        (("input", "args.0"), ("input", "args.0")),
        (None, ("param", "params.extra.kernel")),  # no layer in the mapping: last
    ]


@drawn
@given(seed=SEEDS)
def test_a_report_with_no_checks_is_not_ok_in_any_format(seed):
    report = small_report(passed=True, seed=seed)
    assert report.ok  # the same report with its checks is
    report.checks = []
    assert not report.ok
    assert json.loads(report.render("json"))["ok"] is False
    assert "**FAILED**: 0/0 checks passed." in report.render("markdown")
