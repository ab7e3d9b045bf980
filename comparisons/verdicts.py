"""The verdict types: `Check` (one verdict) and `ComparisonReport` (every verdict of one comparison).

The bottom layer of comparisons: it imports nothing else of the package but `errors`, so judging
(`comparisons.judge`) and rendering (`comparisons.render`) can both build on it.
`ComparisonReport.render` looks formats up in `RENDERERS`, which `comparisons.render` fills when
the package is imported; that keeps rendering above these types instead of beside them.
The JSON schema is documented in docs/report_schema.md; bump SCHEMA_VERSION on any change to it.
"""
from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from comparisons.errors import UsageError

if TYPE_CHECKING:
    from comparisons.placement import PlacementMap

SCHEMA_VERSION = 2


@dataclasses.dataclass(frozen=True)
class Leaf:
    """One leaf's verdict inside a numeric check, judged at its own scale (docs/report_schema.md#leaves).

    `path` is the report's one spelling ('head.kernel', 'logits.0'); `max_abs` is max |a - b|, `rel`
    max |a - b| / max |b|; `atol` the leaf's bound on entries near zero; `kind` what was judged or
    what broke ("values", "zero", "non_finite", "shape", "dtype", "missing", "extra"); `cause`
    ("port", "rounding", "data_parallel" or None) why a leaf differs; `message` says it in words.
    """

    path: str
    max_abs: float | None
    rel: float | None
    passed: bool
    cause: str | None = None
    kind: str = "values"
    atol: float | None = None
    message: str = ""


@dataclasses.dataclass(frozen=True)
class Check:
    """One verdict: `subject` (e.g. "outputs") compared on `compared` (e.g. "torch DP vs single").

    Numeric checks judge every leaf on its own (`leaves`) and pass only if each does; `max_abs` is
    the largest max |a - b|, `rel_norm` the whole tree's ||a - b|| / ||b|| (shown, never deciding)
    and `tolerance` the rtol. `cause` ("port" or "rounding") says why a torch-vs-JAX check differs.
    Placement checks carry no numbers; `detail` says what differs.
    """

    subject: str
    compared: str
    passed: bool
    max_abs: float | None = None
    rel_norm: float | None = None
    tolerance: float | None = None
    detail: str = ""
    leaves: tuple[Leaf, ...] = ()
    cause: str | None = None


@dataclasses.dataclass
class ComparisonReport:
    """Everything `compare` found; `ok` is True only if every check passed."""

    model: str
    batch_size: int
    devices: int
    chunk_sizes: list[int]
    strategies: list[str]
    steps: int
    optimizer: str
    dtype: str
    seed: int
    torch_devices: str
    tolerance: dict[str, float]
    checks: list[Check] = dataclasses.field(default_factory=list)
    placements: dict[str, PlacementMap] = dataclasses.field(default_factory=dict)
    notes: list[str] = dataclasses.field(default_factory=list)
    layers: dict[str, str] = dataclasses.field(default_factory=dict)  # torch layer -> Flax layer path
    precision: str = "off"  # "off", "float64-check" (a float64 run tells port from rounding) or "float64"
    # The layer view (docs/report_schema.md#layer-view); None when it did not run.
    layer_view: list[dict[str, Any]] | None = None  # one row per call of a mapped layer, torch beside Flax
    first_divergence: dict[str, Any] | None = None  # where torch and Flax first part; None: nowhere
    replica_divergences: list[dict[str, Any]] | None = None  # replicas computing unlike one device on their chunk
    drift: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # the torch-vs-JAX gap per step
    bench: dict[str, Any] | None = None  # every side's step time (docs/report_schema.md#bench); None: not asked
    flax: str | None = None  # the JAX side's Flax API, "nnx" or "linen"; None: no Flax model, or not recorded

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(check.passed for check in self.checks)

    @property
    def failures(self) -> list[Check]:
        return [check for check in self.checks if not check.passed]

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form (docs/report_schema.md)."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {
            "schema_version": SCHEMA_VERSION, **fields, "ok": self.ok,
            "checks": [dataclasses.asdict(check) for check in self.checks],
            "placements": {name: pm.to_rows() for name, pm in self.placements.items()},
        }

    def to_json(self, indent: int | None = 2) -> str:
        """Standard JSON (RFC 8259): a figure that is not finite is written as the string "NaN", "Infinity" or
        "-Infinity", since JSON has no such numbers and strict parsers refuse Python's bare NaN."""
        return json.dumps(json_safe(self.to_dict()), indent=indent, allow_nan=False)

    def render(self, fmt: str) -> str:
        """The report as `fmt`: one of RENDERERS ("table", "json", "markdown", "html")."""
        renderer = RENDERERS.get(fmt)
        if renderer is None:
            raise UsageError(f"render: format {fmt!r} is unknown; use one of {', '.join(RENDERERS)}")
        return renderer(self)


def json_safe(value: Any) -> Any:
    """`value` with every float that is not finite replaced by its name as a string (JSON has no NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(item) for item in value]
    return value


# Format name -> function rendering a report as text; filled by comparisons.render.
RENDERERS: dict[str, Callable[[ComparisonReport], str]] = {}
