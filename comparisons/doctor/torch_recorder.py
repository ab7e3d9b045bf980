"""What the torch probe records: why a tensor is on the wrong device, and the evidence per finding.

One `Recorder` per doctor run, shared by every replica's thread (hence the lock): the origins of
shared and tainted tensors, the replicas' parameter and buffer slots, the containers they share,
and the evidence that `torch_report` turns into Findings.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils.weak import WeakIdKeyDictionary

from comparisons.doctor.torch_walk import cpu_data as _cpu_data
from comparisons.doctor.torch_walk import entries, memory_span

_MAX_MADE = 10_000  # tensors made on a wrong device that are kept by storage address, per run


@dataclass(frozen=True)
class Origin:
    """Why a tensor is on the wrong device: the finding it belongs to."""

    kind: str   # unreplicated-tensor | unreplicated-module | fixed-device-creation | shared-cache
    where: str  # attribute path or the user's file:line
    op: str = ""


@dataclass
class Evidence:
    """What the probe saw for one (kind, where): accumulated over replicas, merged into one Finding."""

    kind: str
    where: str
    replicas: set[int] = field(default_factory=set)
    devices: set[str] = field(default_factory=set)
    uses: list[str] = field(default_factory=list)  # user lines where it was mixed or written
    ops: list[str] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)

    def add(self, replica: int | None, devices=(), use: str | None = None, op: str | None = None) -> None:
        if replica is not None:
            self.replicas.add(replica)
        self.devices.update(map(str, devices))
        if use and use not in self.uses:
            self.uses.append(use)
        if op and op not in self.ops:
            self.ops.append(op)


class Recorder:
    """Shared by every replica's thread: known origins, taint, and the evidence so far."""

    def __init__(self, devices: list[torch.device]) -> None:
        self.devices = devices
        self.lock = threading.Lock()
        self.evidence: dict[tuple[str, str], Evidence] = {}
        self.known: dict[int, tuple[torch.Tensor, Origin]] = {}  # shared tensors, by identity
        self.tainted = WeakIdKeyDictionary()                     # tensor -> Origin
        self.slots: list[list[tuple[str, tuple, bool]]] = []     # per replica: (path, span, torch-owned)
        self.containers: list[tuple[str, object]] = []          # (path, list/dict/set) every replica shares
        self.made: dict[int, tuple[object, Origin]] = {}        # storage address -> (storage, origin) made off-device
        self.renamed: dict[str, tuple[str, str | None]] = {}    # "vdev:0" -> ("cuda:0", the user's line)
        self.repairs = 0  # tensors moved to keep a run going; backward cannot follow such moves
        self.errors: list[tuple[BaseException, str | None, int | None]] = []  # (error, user line, replica)

    def note(self, kind: str, where: str, replica: int | None, devices=(), use=None, op=None) -> Evidence:
        with self.lock:
            evidence = self.evidence.get((kind, where))
            if evidence is None:
                evidence = self.evidence[(kind, where)] = Evidence(kind, where)
            evidence.add(replica, devices, use, op)
            return evidence

    def origin_of(self, tensor: torch.Tensor) -> Origin | None:
        entry = self.known.get(id(tensor))
        if entry is not None and entry[0] is tensor:
            return entry[1]
        with self.lock:
            origin = self.tainted.get(tensor)
            made = self.made.get(memory_span(tensor)[0]) if origin is None and self.made else None
        if made is not None:
            return made[1]
        return origin if origin is not None else self._stored_in_container(tensor)

    def _stored_in_container(self, tensor: torch.Tensor) -> Origin | None:
        """A tensor another replica put in a shared list or dict during this forward (a shared cache)."""
        for path, container in self.containers:
            try:
                if any(obj is tensor for _, obj in entries(path, container)):
                    return Origin("shared-cache", path)
            except RuntimeError:  # another replica's thread resized it mid-walk; it is seen at the end
                continue
        return None

    def taint(self, tensor: torch.Tensor, origin: Origin, made: bool = False) -> None:
        """Remember why `tensor` is on the wrong device; `made`: it was just created there.

        A made tensor is also kept by its storage, held alive so its address is not reused (the
        storage, not the tensor: a kept tensor would block `.to()`'s swap of a Parameter made from it):
        torch wraps a layer's new weights in Parameters outside the dispatcher, aliasing the storage.
        """
        with self.lock:
            self.tainted[tensor] = origin
            if made and len(self.made) < _MAX_MADE:
                storage = _cpu_data(tensor).untyped_storage()
                if storage.data_ptr():
                    self.made.setdefault(storage.data_ptr(), (storage, origin))
