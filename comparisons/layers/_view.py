"""The layer view of one comparison: both sides' forwards, lined up row by row, and its first divergence."""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from comparisons.judge import Bounds, Sides, cross
from comparisons.layers._align import judge_trees, rows, side_of
from comparisons.layers._forward import forwards
from comparisons.layers._records import Row, Side
from comparisons.layers._walk import first_divergence
from comparisons.runs import RunInputs
from comparisons.verdicts import Check


@dataclasses.dataclass(frozen=True)
class LayerView:
    """Every mapped layer's call torch beside Flax (`rows`), the whole model output (`output`), and where the
    two first part (`first_divergence`, docs/report_schema.md#layer-view)."""

    rows: list[Row]
    output: Side
    first_divergence: dict[str, Any] | None

    def row_dicts(self) -> list[dict[str, Any]]:
        return [row.to_dict() for row in self.rows]

    def missing_note(self) -> str | None:
        """A note naming the rows with no value on a side (never a divergence), or None when every row has one."""
        names = [f"{row.torch} (call {row.call})" for row in self.rows if not row.has_values]
        if not names:
            return None
        return (f"layer view: no value on one side for {', '.join(names)}: a call one framework made and the other "
                "did not (a result computed once and reused, a layer under nn.remat or a scan); these rows are not "
                "judged, and the first divergence is sought among the rows that have values")


def layer_view(run: RunInputs, checks: Sequence[Check] = (), *, bounds: Bounds, float64: bool = True) -> LayerView:
    """Run one single-device forward per side with every mapped layer recorded, and line them up.

    Args:
      run: the comparison's pair, settings and inputs (the whole batch goes through one forward).
      checks: the comparison's verdicts, read when the forward agrees everywhere (gradient, statistic).
      bounds: the comparison's rtol and atol (the cause: "port" when the run is float64, else measured).
      float64: also run both forwards in float64, which gives each differing row its cause (port or
        rounding), as it does every torch-vs-JAX leaf; ignored when the run is float64 already.
    Costs one eager forward per side (two with float64), a host copy of each layer's first input and output,
    and building the pair once more per dtype. Training mode, as the checks' first step.
    """
    dtype = run.config.dtype
    float32 = forwards(run, dtype)
    wide = forwards(run, "float64") if float64 and dtype != "float64" else None
    tol = Bounds(bounds.rtol, bounds.atol, "port" if dtype == "float64" else None)
    found = rows(run.pair.mapping, float32, wide, tol)
    output = _output_side(run.pair, float32, wide, tol)
    return LayerView(found, output, first_divergence(found, output, run.pair.mapping, checks))


def _output_side(pair: Any, float32: Sides, float64: Sides | None, tol: Bounds) -> Side:
    narrow = cross(pair, "outputs", float32.flax.output, float32.torch.output)
    wide = None if float64 is None else cross(pair, "outputs", float64.flax.output, float64.torch.output)
    return side_of(judge_trees("outputs", narrow, wide, tol), float64 is not None or tol.cause is not None)
