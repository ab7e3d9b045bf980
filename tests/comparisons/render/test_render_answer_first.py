"""The report answer first: the HTML page's order (summary, first divergence, drift chart, layer slot, grid, folded
checks), the drift line in every text format, the chart's SVG, and matplotlib loaded only for a chart."""
from __future__ import annotations

import dataclasses
import re
import subprocess
import sys

import numpy as np
from _helpers_harness import ROOT, small_report
from hypothesis import given, settings
from hypothesis import strategies as st

from comparisons.render.chart import drift_svg

SEEDS = st.integers(0, 2**32 - 1)
drawn = settings(max_examples=6, deadline=None)


def drawn_drift(rng, steps: int, jump_at: int | None = None) -> list[dict]:
    """`steps` entries of rounding-sized gaps (a few ulps, slowly growing); from `jump_at` on, 1e-3 and more."""
    entries = []
    for step in range(1, steps + 1):
        scale = 1e-3 if jump_at is not None and step >= jump_at else 2e-7 * step ** 0.5
        gaps = {q: scale * float(rng.uniform(0.2, 1.0)) for q in ("loss", "gradients", "params")}
        entries.append({"step": step, **gaps, "worst": max(gaps.values()), "strategy": "jax:sharded",
                        "float64": None})
    return entries


def with_drift(seed: int, passed: bool = True, jump_at: int | None = None):
    rng = np.random.default_rng(seed)
    steps = int(rng.integers(2, 30))
    return dataclasses.replace(small_report(passed, seed), steps=steps,
                               drift=drawn_drift(rng, steps, min(jump_at, steps) if jump_at else None))


def positions(html: str, *needles: str) -> list[int]:
    found = [html.find(needle) for needle in needles]
    assert -1 not in found, dict(zip(needles, found))
    return found


@drawn
@given(seed=SEEDS, passed=st.booleans())
def test_the_page_reads_summary_chart_grid_then_the_folded_checks(seed, passed):
    html = with_drift(seed, passed).render("html")
    order = positions(html, "<section class=summary>", "<figure class=chart><svg", "<table class=grid>",
                      "<details class=checks>", "<table><tr><th>check</th>")
    assert order == sorted(order)
    assert html.count("<svg") == 1 and "<details class=checks><summary>All checks:" in html
    verdict = re.search(r"<p class=verdict>(.*?)</p>", html).group(1)
    assert ("OK" in verdict) is passed
    if not passed:  # every failing check is named in the summary, above the grid
        failures = re.search(r"<ul class=failures>(.*?)</ul>", html, re.S).group(1)
        assert failures.count("<li>") == sum(not c.passed for c in with_drift(seed, passed).checks)
        assert "gradients (torch DP vs jax:explicit DP) [port]" in failures


@drawn
@given(seed=SEEDS, jump_at=st.integers(1, 29))
def test_every_text_format_carries_the_one_drift_line(seed, jump_at):
    for report, words in ((with_drift(seed), " like rounding, slowly and steadily"),
                          (with_drift(seed, jump_at=jump_at), "drift: jumps at step")):
        for fmt in ("table", "markdown", "html"):
            assert words in report.render(fmt), fmt
        assert report.to_dict()["drift"] == report.drift


def test_a_report_without_drift_has_no_chart_and_a_failing_one_names_its_first_divergence():
    report = small_report(False, 4)
    html = report.render("html")
    assert "<svg" not in html and "drift:" not in report.render("table") and "First divergence" not in html
    report.first_divergence = {"where": "inside", "torch": "norm", "flax": "norm", "previous": "fc1",
                               "cause": "port", "message": "compare epsilon"}
    html = report.render("html")
    summary = html[html.index("<section class=summary>"):html.index("</section>")]
    assert "inside <code>norm</code> (Flax <code>norm</code>) (port). compare epsilon" in summary
    report.first_divergence = {"where": "between", "torch": "fc2", "flax": "fc2", "previous": "norm", "cause": "port"}
    assert "between <code>norm</code> and <code>fc2</code>" in report.render("html")


def test_the_layer_slot_renders_only_when_the_report_has_a_layer_view():
    report = with_drift(7)
    assert "<section id=layers>" not in report.render("html")
    side = {"max_abs": 0.0, "rel": 0.0, "verdict": "agree", "cause": None, "message": ""}
    parted = {"max_abs": 3.0e-3, "rel": 3.0e-3, "verdict": "differs", "cause": "port", "message": ""}
    report.layer_view = [{"torch": "fc1", "flax": "fc1", "kind": "linear", "call": 0, "input": side, "output": parted},
                         dict(torch="fc2", flax="fc2", kind="linear", call=0, input=parted, output=parted)]
    html = report.render("html")
    order = positions(html, "<section class=summary>", "<section id=layers>", "<table class=grid>")
    assert order == sorted(order)
    assert html.count("<tr class=fail>") == 2 and "differs (port)" in html


@drawn
@given(seed=SEEDS)
def test_the_chart_is_a_log_scale_svg_with_the_tolerance_line_and_the_same_text_for_the_same_numbers(seed):
    rng = np.random.default_rng(seed)
    entries = drawn_drift(rng, int(rng.integers(2, 50)))
    svg = drift_svg(entries, 1e-5)
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>") and 'viewBox="' in svg
    labels = re.findall(r"<!-- (.*?) -->", svg)  # matplotlib names each text it draws as paths
    assert "tolerance 1e-05" in labels and "training step" in labels
    assert any(re.fullmatch(r"\$\\mathdefault\{10\^\{-\d+\}\}\$", label) for label in labels)  # powers of ten
    assert "<script" not in svg and "<image" not in svg and "https://" not in svg and svg == drift_svg(entries, 1e-5)


def test_rendering_a_report_loads_matplotlib_only_when_it_draws_a_chart():
    script = """
import sys, dataclasses
sys.path.insert(0, "tests")
from _helpers_harness import small_report
report = small_report(False, 3)
report.render("html"); report.render("table")
assert "matplotlib" not in sys.modules, "loaded without a chart"
dataclasses.replace(report, drift=[{"step": k, "loss": 1e-7, "gradients": 2e-7, "params": 0.0, "worst": 2e-7,
                                    "strategy": "jax:pmap", "float64": None} for k in (1, 2)]).render("html")
assert "matplotlib" in sys.modules
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]
