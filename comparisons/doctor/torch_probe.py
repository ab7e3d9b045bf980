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

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from comparisons.doctor.source import user_line
from comparisons.doctor.torch_recorder import Origin, Recorder, memory_span

aten = torch.ops.aten
# Ops that move data between devices: they may mix devices by design.
_MOVES = {id(op) for op in (aten._to_copy.default, aten.copy_.default, aten._copy_from.default,
                            aten._copy_from_and_resize.default, aten.lift_fresh.default,
                            aten.lift_fresh_copy.default)}
# CUDA accepts CPU index tensors in indexing (`x[cpu_index]`).
_INDEXES = {id(op) for op in (aten.index.Tensor, aten.index_put.default, aten.index_put_.default,
                              aten._index_put_impl_.default)}
_CREATES = {id(op) for op in (aten.lift_fresh.default, aten.lift_fresh_copy.default)}


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


def _overlap(a: tuple[int, int, int], b: tuple[int, int, int]) -> bool:
    return a[0] == b[0] and a[1] < b[2] and b[1] < a[2]
