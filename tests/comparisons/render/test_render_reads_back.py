"""Every figure and sentence a report renders, read back from the text, Markdown, HTML and JSON and checked
against the report's own numbers (drawn by hypothesis). Expected strings are written here, not taken from
the renderer."""
from __future__ import annotations

import json
import math
import re
from html import escape

import numpy as np
from _helpers_harness import small_report
from hypothesis import given, settings
from hypothesis import strategies as st

from comparisons.render.chart import chart_series
from comparisons.verdicts import Check, Leaf

drawn = settings(max_examples=20, deadline=None)
SEEDS = st.integers(0, 2**32 - 1)
KINDS = ("values", "values", "zero", "shape", "missing")


def drawn_leaf(rng, path: str, passed: bool) -> Leaf:
    kind = "values" if passed else str(rng.choice(KINDS))
    figure = None if kind in ("shape", "missing") else float(rng.uniform(1e-4, 1e-1) if not passed
                                                            else rng.uniform(0, 1e-7))
    cause = None if passed or rng.random() < 0.3 else str(rng.choice(["port", "rounding"]))
    return Leaf(path, figure, figure, passed, cause, kind, float(rng.uniform(1e-6, 1e-5)),
                message=f"`{path}` drawn {kind}")


def drawn_report(seed: int, float64: bool | None = None):
    """small_report's headline and placement, with 2-7 checks of 1-5 leaves, any of them failing."""
    rng = np.random.default_rng(seed)
    report = small_report(True, seed)
    checks = []
    for i in range(int(rng.integers(2, 8))):
        leaves = tuple(drawn_leaf(rng, f"block{i}.layer{j}.kernel", rng.random() < 0.6)
                       for j in range(int(rng.integers(1, 6))))
        passed = all(leaf.passed for leaf in leaves)
        figures = [leaf.max_abs for leaf in leaves if leaf.max_abs is not None]
        checks.append(Check(f"subject{i}", f"torch DP vs jax:explicit DP #{i}", passed, max(figures, default=None),
                            float(rng.uniform(0, 1e-2)), 1e-5, f"detail {i}", leaves,
                            None if passed else next((lf.cause for lf in leaves if lf.cause), None)))
    report.checks = checks
    use64 = bool(rng.integers(2)) if float64 is None else float64
    report.tolerance = {"rtol": 1e-5, "rtol_source": "default for float32", "atol": None,
                        "atol_source": "derived per leaf", "float64_rtol": 1e-12 if use64 else None}
    return report


def formats(report) -> dict[str, str]:
    return {fmt: report.render(fmt) for fmt in ("table", "markdown", "html")}


@drawn
@given(seed=SEEDS)
def test_every_format_counts_the_checks_that_passed(seed):
    report = drawn_report(seed)
    passed = sum(1 for check in report.checks if all(leaf.passed for leaf in check.leaves))
    total = len(report.checks)
    text = formats(report)
    assert f"{passed}/{total} checks passed" in text["table"]
    assert f"**{'OK' if passed == total else 'FAILED'}**: {passed}/{total} checks passed." in text["markdown"]
    words = "every check passed" if passed == total else f"{total - passed} of {total} checks failed"
    assert f"{words} ({passed}/{total} passed)." in text["html"]
    assert f"All checks: {passed}/{total} passed" in text["html"]
    assert json.loads(report.to_json())["ok"] is (passed == total)


@drawn
@given(seed=SEEDS)
def test_every_failing_leaf_is_listed_in_every_format(seed):
    report = drawn_report(seed)
    text = formats(report)
    for check in report.checks:
        for leaf in check.leaves:
            if leaf.passed:
                continue
            assert f"└ {leaf.path}" in text["table"], leaf.path
            assert f"  - {leaf.message}" in text["table"] and f"  - {leaf.message}" in text["markdown"]
            assert f"<li>{escape(leaf.message)}" in text["html"]
    failing_data = [leaf["path"] for check in json.loads(report.to_json())["checks"] for leaf in check["leaves"]
                    if not leaf["passed"]]
    assert failing_data == [leaf.path for check in report.checks for leaf in check.leaves if not leaf.passed]


def worst_failing(check: Check) -> Leaf:
    def badness(leaf):
        return math.inf if leaf.max_abs is None else leaf.max_abs / leaf.atol
    return max((leaf for leaf in check.leaves if not leaf.passed), key=badness)


@drawn
@given(seed=SEEDS)
def test_each_html_failure_bullet_names_the_worst_leaf_and_why(seed):
    report = drawn_report(seed)
    html = report.render("html")
    bullets = re.findall(r"<li>FAIL (.*?)</li>", html.split("<ul class=failures>")[1].split("</ul>")[0]) \
        if "<ul class=failures>" in html else []
    failing = [check for check in report.checks if not check.passed]
    assert len(bullets) == len(failing)
    for bullet, check in zip(bullets, failing):
        leaf = worst_failing(check)
        assert f"<code>{escape(leaf.path)} " in bullet, (bullet, leaf)
        why = {"values": "beyond its bound", "zero": "zero on one side only", "shape": "shapes differ",
               "missing": "missing on one side"}[leaf.kind]
        assert bullet.endswith(f"({leaf.cause or why})</code>"), bullet
        if leaf.max_abs is not None:
            assert f" {leaf.max_abs:.1e} " in bullet


@drawn
@given(seed=SEEDS, float64=st.booleans())
def test_the_tolerance_line_carries_the_float64_sentence_exactly_when_it_ran(seed, float64):
    report = drawn_report(seed, float64)
    sentence = "float64 check: rtol 1e-12, a torch-vs-JAX leaf that differs there is a port difference"
    for fmt, text in formats(report).items():
        assert (sentence in text) is float64, fmt
        assert "rtol 1e-05 (default for float32)" in text


@drawn
@given(seed=SEEDS)
def test_the_layer_table_shows_each_sides_figures_in_their_own_columns(seed):
    rng = np.random.default_rng(seed)
    report = drawn_report(seed)

    def side():
        figure = float(rng.uniform(1e-6, 1e-2))
        return {"max_abs": figure, "rel": float(rng.uniform(1e-6, 1e-2)), "verdict": "rounding", "cause": None,
                "message": ""}
    report.layer_view = [{"torch": f"fc{i}", "flax": f"Dense_{i}", "kind": "linear", "call": 0, "input": side(),
                          "output": side()} for i in range(int(rng.integers(1, 5)))]
    markdown = report.render("markdown")
    for row in report.layer_view:
        cells = [f"{row['input']['max_abs']:.2e}", "rounding", f"{row['output']['max_abs']:.2e}", "rounding",
                 f"{row['output']['rel']:.2e}"]
        assert f"| {row['torch']} | {row['flax']} | linear | 0 | {' | '.join(cells)} |" in markdown


@drawn
@given(seed=SEEDS, previous=st.sampled_from([None, "norm", "blocks.0.mlp"]), at_output=st.booleans())
def test_the_html_names_both_ends_of_a_between_divergence(seed, previous, at_output):
    report = drawn_report(seed)
    torch_name = "(output)" if at_output else "fc2"
    report.first_divergence = {"where": "between", "torch": torch_name, "flax": torch_name, "previous": previous,
                               "cause": "port", "message": "m"}
    html = report.render("html")
    before = "the model input" if previous is None else f"<code>{previous}</code>"
    after = "the model output" if at_output else "<code>fc2</code>"
    assert f"between {before} and {after}: in unmapped code" in html and "None" not in html.split("Summary")[1]


@drawn
@given(seed=SEEDS, steps=st.integers(1, 30), float64=st.booleans())
def test_each_chart_line_plots_its_own_quantity(seed, steps, float64):
    rng = np.random.default_rng(seed)
    entries = [{"step": k, "loss": float(rng.uniform(0, 1e-5)), "gradients": float(rng.uniform(0, 1e-5)),
                "params": float(rng.choice([0.0, rng.uniform(1e-9, 1e-5)])), "worst": 1e-5, "strategy": "jax:pmap",
                "float64": float(rng.uniform(0, 1e-12)) if float64 else None} for k in range(1, steps + 1)]
    series = chart_series(entries)
    assert sorted(series) == sorted(["loss", "gradients", "parameters"] + (["float64 runs (worst)"] if float64 else []))
    for label, key in (("loss", "loss"), ("gradients", "gradients"), ("parameters", "params")):
        expected = [e[key] if e[key] > 0 else None for e in entries]
        assert [None if math.isnan(v) else v for v in series[label]] == expected, label
