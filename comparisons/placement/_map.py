"""PlacementMap: where every tensor of a data-parallel step lives, in one format for torch and JAX.

`placement_of` inspects a torch module, a list of replicas, tensors in nested containers, or a
JAX pytree / list of per-device pytrees, and returns one `PlacementRecord` per tensor (per shard
for a JAX array that spans several devices). torch and JAX are imported only when `obj` holds
their types, so importing this module imports neither.
"""
from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from comparisons.errors import UsageError, UsageTypeError
from comparisons.placement import _walk as walk

ROLES = ("param", "buffer", "input", "output", "grad", "state")


@dataclasses.dataclass(frozen=True)
class PlacementRecord:
    """One tensor (or one shard of a JAX array) and the device it lives on.

    `replica` is None for the original/global value; `logical_index` is the device's position
    in the device list the step was given (None when no list was given or it is not in it).
    `process` is the rank of the process holding it in a multi-process run (None in one process).
    """

    replica: int | None
    path: str
    role: str
    device: str
    logical_index: int | None
    shape: tuple[int, ...]
    dtype: str
    aliases_original: bool | None = None
    process: int | None = None

    @property
    def size(self) -> int:
        return math.prod(self.shape)


@dataclasses.dataclass(frozen=True)
class PlacementDifference:
    """One way two placement maps disagree, keyed by (replica, role, path of the first map)."""

    replica: int | None
    role: str
    path: str
    field: str
    mine: Any
    theirs: Any

    def __str__(self) -> str:
        holder = f"replica {self.replica}" if self.replica is not None else "original"
        return f"{holder} {self.role} {self.path}: {self.field} {self.mine!r} != {self.theirs!r}"


@dataclasses.dataclass(frozen=True)
class PlacementMap:
    """All placement records of one backend's step, with helpers to group, diff and render them."""

    records: tuple[PlacementRecord, ...]

    def __iter__(self):
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)

    def __add__(self, other: PlacementMap) -> PlacementMap:
        return PlacementMap(self.records + other.records)

    def by_replica(self) -> dict[int | None, list[PlacementRecord]]:
        """Records grouped by replica index (None: the original/global values)."""
        groups: dict[int | None, list[PlacementRecord]] = {}
        for record in self.records:
            groups.setdefault(record.replica, []).append(record)
        return groups

    def filter(self, *, role: str | None = None, replica: Any = ...) -> PlacementMap:
        """The records with this role and/or replica (`replica=None` selects the originals)."""
        return PlacementMap(tuple(
            r for r in self.records
            if (role is None or r.role == role) and (replica is ... or r.replica == replica)))

    def diff(self, other: PlacementMap, name_map: Mapping[str, str | None] | None = None,
             *, fields: Sequence[str] = ("logical_index", "size", "aliases_original"),
             ) -> list[PlacementDifference]:
        """Where `other` places tensors differently from `self`.

        Args:
          other: the map to compare with (e.g. JAX's, when `self` is torch's).
          name_map: `self` path -> `other` path (e.g. "fc.weight" -> "params.fc.kernel"); a path
            mapped to None has no counterpart and is skipped. Unmapped paths compare as is.
          fields: record fields compared; `aliases_original` is compared only if both know it.
        Returns:
          one PlacementDifference per mismatch, including tensors present on one side only.
        """
        name_map = name_map or {}
        theirs = {(r.replica, r.role, r.path): r for r in other.records}
        differences, matched = [], set()
        for mine in self.records:
            mapped = name_map.get(mine.path, mine.path)
            if mapped is None:
                continue
            key = (mine.replica, mine.role, mapped)
            match = theirs.get(key)
            if match is None:
                differences.append(_difference(mine, "present", True, False))
                continue
            matched.add(key)
            for field in fields:
                a, b = getattr(mine, field), getattr(match, field)
                if field == "aliases_original" and (a is None or b is None):
                    continue
                if a != b:
                    differences.append(_difference(mine, field, a, b))
        skipped = {p for p, q in name_map.items() if q is None}
        for key, record in theirs.items():
            if key not in matched and record.path not in skipped:
                differences.append(_difference(record, "present", False, True))
        return differences

    def to_rows(self) -> list[dict[str, Any]]:
        """One JSON-ready dict per record (shape as a list; `process` only when set)."""
        return [{**_row(r), "shape": list(r.shape)} for r in self.records]

    def to_json(self, **dumps_kwargs: Any) -> str:
        return json.dumps(self.to_rows(), **dumps_kwargs)

    @classmethod
    def from_rows(cls, rows: Sequence[Mapping[str, Any]]) -> PlacementMap:
        return cls(tuple(PlacementRecord(**{**row, "shape": tuple(row["shape"])}) for row in rows))

    def grid(self) -> tuple[list[tuple[int | None, str]], list[tuple[str, str]], dict[tuple, list]]:
        """A device x tensor picture: (columns, tensors, cells).

        `columns` are (logical_index, device) pairs in device-list order (a tensor outside the list
        gets a column of its own, last); `tensors` are (role, path) in first-seen order;
        `cells[(logical_index, device, role, path)]` lists the records of that tensor there.
        """
        cells: dict[tuple, list] = {}
        for r in self.records:
            cells.setdefault((r.logical_index, r.device, r.role, r.path), []).append(r)
        columns = sorted({(r.logical_index, r.device) for r in self.records},
                         key=lambda c: (c[0] is None, c[0] or 0, c[1]))
        tensors = list(dict.fromkeys((r.role, r.path) for r in self.records))
        return columns, tensors, cells


def _row(record: PlacementRecord) -> dict[str, Any]:
    row = dataclasses.asdict(record)
    if row["process"] is None:
        del row["process"]  # single-process reports keep their schema-1 rows unchanged
    return row


def _difference(record: PlacementRecord, field: str, mine: Any, theirs: Any) -> PlacementDifference:
    return PlacementDifference(record.replica, record.role, record.path, field, mine, theirs)


def placement_of(obj: Any, devices: Sequence[Any] | None = None, original: Any = None, *,
                 role: str | None = None, name: str = "", per_replica: bool | None = None,
                 ) -> PlacementMap:
    """Placement records of `obj`, a torch or JAX value; reads metadata only (no copy, no sync).

    Args:
      obj: a torch `nn.Module`, a list of replica modules, tensors in nested containers, a JAX
        pytree (flax variables: "params" -> role param, other collections -> buffer), or a list
        of per-device pytrees (`per_replica=True`; a list of modules is per-replica by itself).
      devices: the device list of the step; each record's `logical_index` is a position in it.
      original: the value replicas were made from; sets `aliases_original` on replica records.
      role: role for tensors outside a module/variables dict (e.g. "input", "output", "grad").
      name: prefix for container paths, e.g. "args" gives "args.0", "out" gives "out.logits".
    Returns:
      a PlacementMap with one record per tensor (per addressable shard for multi-device arrays).
    """
    if role is not None and role not in ROLES:
        raise UsageError(f"placement_of: role={role!r} is not one of {ROLES}")
    backend = walk.backend_of(obj)
    if backend is None:
        raise UsageTypeError(f"placement_of: obj of type {type(obj).__name__} holds no torch tensor, "
                        "torch module or JAX array; pass a module, replicas, tensors or a pytree")
    labels = [walk.device_label(d) for d in devices] if devices is not None else None
    references = None if original is None else walk.reference_keys(original, backend, role, name)
    leaves = walk.items(obj, backend, role, name, per_replica, labels)
    return PlacementMap(tuple(_record(leaf, labels, references) for leaf in leaves))


def _record(leaf: walk.Leaf, labels: list[str] | None,
            references: Mapping[tuple[str, str], tuple[str, int]] | None) -> PlacementRecord:
    """The PlacementRecord of one Leaf; aliasing is judged only when `references` is given."""
    aliases = None
    if references is not None and leaf.replica is not None:
        reference = references.get((leaf.role, leaf.path))
        aliases = reference is not None and reference == walk.alias_key(leaf.value)
    return PlacementRecord(
        replica=leaf.replica, path=leaf.path, role=leaf.role, device=leaf.device,
        logical_index=_logical_index(leaf, labels), shape=tuple(leaf.value.shape),
        dtype=str(leaf.value.dtype).removeprefix("torch."), aliases_original=aliases)


def _logical_index(leaf: walk.Leaf, labels: Sequence[str] | None) -> int | None:
    if not labels:
        return None
    # With a repeated device list (["cpu"] * 4) the replica index says which entry is meant.
    if leaf.replica is not None and leaf.replica < len(labels) \
            and labels[leaf.replica] == leaf.device:
        return leaf.replica
    return labels.index(leaf.device) if leaf.device in labels else None
