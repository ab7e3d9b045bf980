"""The drift chart: the torch-vs-JAX gap per training step on a log scale, against the tolerance line, as SVG.

Drawn by matplotlib (Agg, no display), imported only when a chart is drawn: measured on 2 shared cores
(load average 10), its import costs 0.8-1.0 s once per process and a 50-step chart 0.6-0.9 s, against
30-75 s for the 50-step comparison it draws; a report without drift never loads it. The SVG is
self-contained (glyphs as paths, no fonts or scripts), scales to its box, and is the same for the same
numbers (fixed ids and no date), so a page that embeds it does not change from one run to the next.
"""
from __future__ import annotations

import io
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

LINES = (  # (entry key, label, style): the float32 quantities, then the float64 run's gap
    ("loss", "loss", {"color": "#0072b2", "linewidth": 1.2}),
    ("gradients", "gradients", {"color": "#e69f00", "linewidth": 1.2}),
    ("params", "parameters", {"color": "#009e73", "linewidth": 1.2}),
    ("float64", "float64 runs (worst)", {"color": "#555555", "linewidth": 1.2, "linestyle": "--"}),
)


STYLES = {label: style for _, label, style in LINES}


def of_bound(entries: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the chart plots each gap over the checks' bound (every entry has `of_bound`, the line at 1) rather
    than the relative gap against the rtol (a report written before the entries had it)."""
    return bool(entries) and all(entry.get("of_bound") for entry in entries)


def chart_series(entries: Sequence[Mapping[str, Any]]) -> dict[str, list[float]]:
    """{line label: its value per step}, as the chart plots them: each gap over the checks' bound
    (`of_bound`), else the relative gap. A line whose entries lack a value (no float64 run) is left out, and
    an exact zero (the sides equal bit for bit) is NaN, since a log scale has no zero."""
    ratios, series = of_bound(entries), {}
    for key, label, _ in LINES:
        values = [(entry["of_bound"] if ratios else entry).get(key) for entry in entries]
        if all(value is not None for value in values):
            series[label] = [value if value > 0 else math.nan for value in values]
    return series


def tolerance_line(entries: Sequence[Mapping[str, Any]], rtol: float) -> float:
    """Where the dotted tolerance line lies: 1 (the checks' bound) for gaps over their bound, else `rtol`."""
    return 1.0 if of_bound(entries) else rtol


def chart_caption(entries: Sequence[Mapping[str, Any]]) -> str:
    """The words under the chart: what its lines measure and where the tolerance lies."""
    if of_bound(entries):
        return ("The largest torch-vs-JAX gap per training step over the bound the checks judge it at (loss, "
                "gradients and parameters, each leaf at its own bound; the float64 runs' gap at float64's bound), "
                "over the strategy with the largest gap; the dotted line, 1, is that bound: a step above it is "
                "beyond what the checks pass.")
    return ("The largest relative torch-vs-JAX gap per training step (loss; gradients and parameters, each leaf at "
            "its own scale), over every strategy; the dotted line is the tolerance.")


def drift_svg(entries: Sequence[Mapping[str, Any]], rtol: float, *, title: str = "") -> str:
    """The chart of `entries` (a report's `drift`) as an SVG document (a string), the tolerance dotted: at 1
    when the entries hold each gap over the checks' bound (`of_bound`), else at `rtol` under the relative gaps.

    Costs matplotlib's import the first time (see the module docstring) and a few milliseconds a chart.
    """
    import matplotlib

    matplotlib.use("Agg")  # no display; before pyplot is imported anywhere in this process
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    steps = [entry["step"] for entry in entries]
    figure = Figure(figsize=(6.4, 3.2), layout="constrained")
    axes = figure.add_subplot()
    for label, values in chart_series(entries).items():
        axes.plot(steps, values, label=label, marker=".", markersize=4, **STYLES[label])
    ratios = of_bound(entries)
    axes.axhline(tolerance_line(entries, rtol), color="#b00020", linestyle=":", linewidth=1.2,
                 label="tolerance (the checks' bound)" if ratios else f"tolerance {rtol:.0e}")
    axes.set_yscale("log")
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel("training step")
    axes.set_ylabel("gap / the checks' bound, torch vs JAX" if ratios else "relative gap, torch vs JAX")
    axes.set_title(title, fontsize=10)
    axes.grid(True, which="major", linewidth=0.3)
    axes.legend(fontsize=7, loc="best")
    return _as_svg(figure)


def _as_svg(figure: Any) -> str:
    import matplotlib

    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": "dp-compare", "svg.fonttype": "path"}):
        figure.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
    svg = buffer.getvalue()
    svg = svg[svg.index("<svg"):]  # without the XML prolog and doctype: the same text inline or in a file
    # nor the RDF metadata block: a self-contained page names no web address
    return re.sub(r"\s*<metadata>.*?</metadata>", "", svg, count=1, flags=re.S)


def bench_svg(sides: Sequence[Mapping[str, Any]]) -> str:
    """A report's bench `sides` as horizontal bars (median seconds per step, log scale) with a whisker from the
    fastest to the slowest step, as an SVG document. Costs matplotlib's import the first time."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    names = [side["side"] for side in sides]
    medians = [side["median_s"] for side in sides]
    spread = [[m - side["min_s"] for m, side in zip(medians, sides)],
              [side["max_s"] - m for m, side in zip(medians, sides)]]
    figure = Figure(figsize=(7.2, 0.9 + 0.32 * len(sides)), layout="constrained")
    axes = figure.add_subplot()
    colours = ["#e69f00" if side["framework"] == "torch" else "#0072b2" for side in sides]
    axes.barh(range(len(sides)), medians, xerr=spread, color=colours, ecolor="#333333", capsize=3, height=0.6)
    axes.set_yticks(range(len(sides)), names, fontsize=7)
    axes.invert_yaxis()
    axes.set_xscale("log")
    axes.set_xlabel("seconds per training step (median; whisker: min to max)")
    axes.grid(True, axis="x", which="major", linewidth=0.3)
    return _as_svg(figure)
