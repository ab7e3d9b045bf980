"""One section of results: labelled rows, each a ratio, a set of shares or a few seconds."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from benchmarks.timing import Ratio


@dataclass
class Section:
    """A titled table. `unavailable` holds the reason when the code it measures is missing."""

    id: str
    title: str
    what: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    unavailable: str | None = None

    def add_ratio(self, labels: dict[str, Any], ratio: Ratio, target: float | None = None) -> None:
        """A row whose figure is tA/tB; `target` is the ratio it should not exceed."""
        self.rows.append({"labels": labels, "ratio": ratio.as_dict(), "target": target})

    def add_shares(self, labels: dict[str, Any], shares: dict[str, dict[str, float]]) -> None:
        """A row of each step's share of the whole (see timing.measure_shares)."""
        self.rows.append({"labels": labels, "shares": shares})

    def add_failure(self, labels: dict[str, Any], error: BaseException) -> None:
        """A row that could not be measured, with the error that stopped it."""
        self.rows.append({"labels": labels, "error": f"{type(error).__name__}: {error}"[:300]})

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "what": self.what, "rows": self.rows,
                "notes": self.notes, "unavailable": self.unavailable}


def unavailable(section_id: str, title: str, what: str, reason: str) -> Section:
    return Section(section_id, title, what, unavailable=reason)
