"""Rendering a doctor report: the table names every field, JSON has the documented schema, HTML escapes."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from comparisons.doctor import KINDS, DoctorReport, Finding
from comparisons.doctor.findings import FIXES
from comparisons.doctor.render import render


def report(*findings: Finding, notes=()) -> DoctorReport:
    return DoctorReport("pkg.mod:make", "torch", ("vdev:0", "vdev:1", "vdev:2"), findings, notes)


def finding(kind="unreplicated-tensor", where="encoder.layers[2].scale", source="model.py:17") -> Finding:
    return Finding(kind, where, (1, 2), ("vdev:0",), "shared from vdev:0 <by reference>", "register it", source)


def test_json_has_one_record_per_finding_with_the_documented_keys():
    data = json.loads(render(report(finding(), finding("state-on-self", "cache", None)), "json"))
    assert [f["kind"] for f in data["findings"]] == ["unreplicated-tensor", "state-on-self"]
    assert set(data["findings"][0]) >= {"kind", "where", "replicas", "message", "fix"}
    assert data["findings"][0]["replicas"] == [1, 2] and data["ok"] is False
    assert data["devices"] == ["vdev:0", "vdev:1", "vdev:2"] and data["backend"] == "torch"


def test_clean_report_is_ok_in_every_format():
    clean = report(notes=("only replicas 0..1 ran",))
    assert clean.ok and json.loads(clean.render("json"))["findings"] == []
    assert "nothing found" in clean.render("table") and "only replicas 0..1 ran" in clean.render("table")
    assert "<span class=ok>OK</span>" in clean.render("html")


def test_table_names_kind_where_replicas_devices_line_message_and_fix():
    text = render(report(finding()), "table")
    for part in ("unreplicated-tensor", "encoder.layers[2].scale", "replicas 1, 2", "devices vdev:0",
                 "line model.py:17", "what: shared from vdev:0", "fix:  register it", "1 finding"):
        assert part in text, part


def test_html_escapes_user_text_and_marks_the_failure():
    page = render(report(finding(where="layers['<b>']")), "html")
    assert "<b>" not in page and "layers[&#x27;&lt;b&gt;&#x27;]" in page
    assert "&lt;by reference&gt;" in page and "FOUND PROBLEMS" in page and "<script" not in page


def test_unknown_format_names_the_choices():
    with pytest.raises(ValueError, match="table, json, html"):
        render(report(), "markdown")


def test_the_issues_kinds_all_exist_and_each_has_a_fix():
    required = {"unreplicated-tensor", "unreplicated-module", "fixed-device-creation", "cross-device-op",
                "lost-inplace-update", "state-on-self", "closed-over-array", "side-effect-in-trace"}
    assert required <= set(KINDS) and all(len(FIXES[kind]) > 20 for kind in KINDS)


def test_importing_the_doctor_imports_neither_torch_nor_jax():
    code = ("import sys, comparisons.doctor, comparisons.doctor.render, comparisons.doctor.cli; "
            "print(sorted(m for m in ('torch', 'jax', 'flax') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
