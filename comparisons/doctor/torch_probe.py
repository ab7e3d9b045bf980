"""The torch probe: a dispatch mode that sees every aten op a replica runs.

For each op it (1) checks that the tensors it mixes share a device, by CUDA's rules (0-dim CPU
tensors are scalars, CPU index tensors are allowed, copies may cross devices), and if not, records
where the odd tensor came from and moves it onto the replica's device so the run goes on and later
problems are found too; (2) records in-place writes to the replica's parameters and buffers;
(3) remembers tensors an op leaves on another device than the replica's (created on a fixed device,
or computed from a shared tensor), so a later mix is blamed on their origin, not on the victim line.
Cost: a Python call per aten op (see docs/performance.md); frames are walked only when recording.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.weak import WeakIdKeyDictionary

from comparisons.doctor.source import user_line
from comparisons.doctor.torch_walk import entries

aten = torch.ops.aten
# Ops that move data between devices: they may mix devices by design.
_MOVES = {id(op) for op in (aten._to_copy.default, aten.copy_.default, aten._copy_from.default,
                            aten._copy_from_and_resize.default, aten.lift_fresh.default,
                            aten.lift_fresh_copy.default)}
# CUDA accepts CPU index tensors in indexing (`x[cpu_index]`).
_INDEXES = {id(op) for op in (aten.index.Tensor, aten.index_put.default, aten.index_put_.default,
                              aten._index_put_impl_.default)}
_MAX_MADE = 10_000  # tensors made on a wrong device that are kept by storage address, per run
_CREATES = {id(op) for op in (aten.lift_fresh.default, aten.lift_fresh_copy.default)}


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


class ReplicaProbe(TorchDispatchMode):
    """Active in replica `replica`'s thread (or, with replica None, around the backward pass)."""

    def __init__(self, recorder: Recorder, replica: int | None) -> None:
        super().__init__()
        self.recorder = recorder
        self.replica = replica
        self.device = recorder.devices[replica] if replica is not None else None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if id(func) not in _MOVES:
            args, kwargs = self._check_devices(func, args, kwargs)
        if self.replica is not None:
            self._check_writes(func, args, kwargs)
        out = func(*args, **kwargs)
        if self.replica is not None:
            self._follow(func, args, kwargs, out)
        return out

    # (1) mixed devices
    def _check_devices(self, func, args, kwargs):
        considered = [t for t in _tensors(args, kwargs) if not _is_scalar(t)]
        if id(func) in _INDEXES:
            considered = [t for t in considered if t.device.type != "cpu"]
        devices = {t.device for t in considered}
        if len(devices) < 2:
            return args, kwargs
        target = self.device if self.device in devices else considered[0].device
        odd = [t for t in considered if t.device != target]
        self._blame(func, odd, target)
        self.recorder.repairs += len(odd)
        # The aten op itself: `Tensor.to` inside a dispatch handler may keep a wrapper on its device.
        moved = {id(t): aten._to_copy.default(t, device=target) for t in odd}
        return _replace(args, moved), _replace(kwargs, moved)

    def _blame(self, func, odd: list[torch.Tensor], target: torch.device) -> None:
        """Attribute each odd tensor to its origin's finding, or to this op (a cross-device-op)."""
        line = user_line()
        replica = self.replica
        if replica is None and target in self.recorder.devices:  # backward: the replica whose device it is
            replica = self.recorder.devices.index(target)
        for tensor in odd:
            origin = self.recorder.origin_of(tensor)
            if origin is None:
                where = line or f"backward: {func}"
                self.recorder.note("cross-device-op", where, replica, [tensor.device], line, str(func))
            else:
                self.recorder.note(origin.kind, origin.where, replica, [tensor.device], line, origin.op or None)

    # (2) in-place writes to the replica's parameters and buffers
    def _check_writes(self, func, args, kwargs) -> None:
        written = _written_tensors(func, args, kwargs)
        if not written:
            return
        slots = self.recorder.slots[self.replica]
        for tensor in written:
            span = memory_span(tensor)
            for path, slot_span, torch_owned in slots:
                if not torch_owned and _overlap(span, slot_span):
                    lost = self.replica != 0  # replica 0 writes the original's storage: kept
                    evidence = self.recorder.note("lost-inplace-update", path, self.replica if lost else None,
                                                  [self.device] if lost else [], user_line(), str(func))
                    evidence.detail.setdefault("writers", set()).add(self.replica)

    # (3) outputs left on another device than the replica's
    def _follow(self, func, args, kwargs, out) -> None:
        inputs = {id(t) for t in _tensors(args, kwargs)}
        for result in _tensors(out, {}):
            if result.device == self.device or _is_scalar(result) or id(result) in inputs:
                continue  # an in-place op returns its input: its origin is known already, and a weak
                # reference to it would stop `.to()` swapping it (a Parameter's init on virtual devices)
            origin = self._inherited_origin(args, kwargs, result.device)
            if origin is None and (id(func) in _MOVES or id(func) in _CREATES or _no_tensor(args, kwargs)):
                origin = Origin("fixed-device-creation", user_line() or str(func), f"{func} -> {result.device}")
                self.recorder.taint(result, origin, made=True)
            elif origin is not None:
                self.recorder.taint(result, origin)

    def _inherited_origin(self, args, kwargs, device) -> Origin | None:
        for tensor in _tensors(args, kwargs):
            if tensor.device == device:
                origin = self.recorder.origin_of(tensor)
                if origin is not None:
                    return origin
        return None


def _is_scalar(tensor: torch.Tensor) -> bool:
    """A 0-dim CPU tensor, which CUDA ops accept as a scalar next to tensors on any device."""
    return tensor.dim() == 0 and tensor.device.type == "cpu"


def _tensors(args, kwargs):
    for value in (*args, *kwargs.values()) if isinstance(args, (tuple, list)) else (args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, (list, tuple)):
            for item in value:
                if isinstance(item, torch.Tensor):
                    yield item


def _no_tensor(args, kwargs) -> bool:
    """True for an op with no tensor argument (a factory such as aten.ones); never asks a tensor's truth."""
    return next(_tensors(args, kwargs), None) is None


def _replace(obj, moved: dict[int, torch.Tensor]):
    if isinstance(obj, torch.Tensor):
        return moved.get(id(obj), obj)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_replace(item, moved) for item in obj)
    if isinstance(obj, dict):
        return {key: _replace(value, moved) for key, value in obj.items()}
    return obj


_WRITES: dict[int, tuple[list[int], list[str]]] = {}


def _written_tensors(func, args, kwargs) -> list[torch.Tensor]:
    """The arguments an op writes (`Tensor(a!)` in its schema); cached per op."""
    spec = _WRITES.get(id(func))
    if spec is None:
        arguments = func._schema.arguments
        written = [(i, a.name) for i, a in enumerate(arguments) if a.alias_info is not None and a.alias_info.is_write]
        spec = _WRITES[id(func)] = ([i for i, _ in written], [name for _, name in written])
    positions, names = spec
    if not positions:
        return []
    found = [args[i] for i in positions if i < len(args)] + [kwargs[n] for n in names if n in kwargs]
    return [t for t in found if isinstance(t, torch.Tensor)]


def memory_span(tensor: torch.Tensor) -> tuple[int, int, int]:
    """(storage address, first byte, end byte) of the memory a tensor can touch.

    Virtual-device tensors have no storage of their own; their CPU data's storage stands in.
    """
    data = _cpu_data(tensor)
    start = data.storage_offset() * data.element_size()
    extent = 1 + sum((size - 1) * stride for size, stride in zip(data.shape, data.stride())) if data.numel() else 0
    return data.untyped_storage().data_ptr(), start, start + extent * data.element_size()


def _cpu_data(tensor: torch.Tensor) -> torch.Tensor:
    if tensor.device.type in ("cpu", "cuda", "meta"):
        return tensor
    from dp_torch import virtual

    return virtual.cpu_view(tensor) if virtual.is_installed() else tensor


def _overlap(a: tuple[int, int, int], b: tuple[int, int, int]) -> bool:
    return a[0] == b[0] and a[1] < b[2] and b[1] < a[2]
