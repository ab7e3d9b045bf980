"""`doctor_torch`: one DataParallel forward (and backward) of the user's model, watched per replica.

The run is `dp_torch.DataParallel` itself, with its `parallel_apply` step wrapped: before the
replicas run, their `__dict__`s are searched for what `replicate` shared (torch_walk); while each
runs, a dispatch mode watches its ops in its own thread (torch_probe); afterwards, attributes the
replicas assigned are collected. The replicas take turns, in index order, so what one finds does not
depend on thread timing (which replica fills a shared cache first, say). Needs distinct devices:
CUDA GPUs, or virtual ones on a CPU.
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_leaves

import dp_torch
from comparisons.doctor.findings import DoctorReport
from comparisons.doctor.source import assignment_line, error_line, fill_line
from comparisons.doctor.torch_cuda_names import CudaAsReplicaDevice
from comparisons.doctor.torch_probe import ReplicaProbe
from comparisons.doctor.torch_recorder import Origin, Recorder, memory_span
from comparisons.doctor.torch_report import findings_of
from comparisons.doctor.torch_walk import (
    Shared,
    SharedContainer,
    assigned_since,
    entries,
    find_shared,
    registered_slots,
    shared_containers,
    state_snapshot,
)


def doctor_torch(module: nn.Module, *inputs: Any, devices: int | Sequence[torch.device] = 4,
                 backward: bool = False, kwargs: dict[str, Any] | None = None,
                 target: str | None = None) -> DoctorReport:
    """Run `module` once under DataParallel on distinct devices and report what is not replicated.

    Args:
        module: the model; moved to the first device (`module.to`), as DataParallel requires.
        *inputs: the forward's positional inputs (the whole batch; DataParallel splits it).
        devices: a list of distinct devices, or a count: CUDA GPUs when there are that many, else
            virtual devices (installs `dp_torch.virtual` in this process if needed, which is global).
        backward: also run backward on the sum of the floating outputs.
        kwargs: keyword inputs of the forward.
        target: a name for the report (default: the module's class).
    Returns:
        A DoctorReport; `.ok` when nothing was found. Costs one forward (and backward) with a
        Python call per op: about 1.3-2x a plain DataParallel step (docs/performance.md).
    """
    device_list = resolve_devices(devices)
    recorder = Recorder(device_list)
    notes: list[str] = []
    model = None
    try:
        module.to(device_list[0])
        model = _ProbedDataParallel(module, device_list, recorder)
        output = model(*inputs, **(kwargs or {}))
        if backward:
            _backward(output, recorder, notes)
    except Exception as error:  # noqa: BLE001 - any failure of the user's model is a finding
        if not recorder.errors:
            recorder.errors.append((error, error_line(error) or "DataParallel", None))
    if model is not None and 0 < model.replicas_run < len(device_list):
        notes.append(f"the batch gave {model.replicas_run} chunk(s) for {len(device_list)} devices, so only "
                     f"replicas 0..{model.replicas_run - 1} ran; use a batch of at least {len(device_list)}")
    notes += [f"the model names {cuda} (at {line or 'an unknown line'}); with no CUDA here the doctor ran it on "
              f"{device} (cuda:k -> vdev:k; cuda and .cuda() -> the replica's own device, as in DataParallel's "
              f"worker)" for device, (cuda, line) in sorted(recorder.renamed.items())]
    return DoctorReport(target or type(module).__name__, "torch", tuple(map(str, device_list)),
                        tuple(findings_of(recorder)), tuple(notes))


def resolve_devices(devices: int | Sequence[torch.device]) -> list[torch.device]:
    """A count -> the first N CUDA GPUs when present, else virtual devices; a list -> as given."""
    if isinstance(devices, int):
        if devices < 2:
            raise ValueError(f"doctor: devices={devices}; DataParallel problems need at least 2 devices, "
                             "pass devices=2 or more")
        if torch.cuda.device_count() >= devices:
            return [torch.device("cuda", i) for i in range(devices)]
        return _virtual_devices(devices)
    device_list = [torch.device(d) for d in devices]
    if len(set(device_list)) != len(device_list) or len(device_list) < 2:
        raise ValueError(f"doctor: devices={[str(d) for d in device_list]}; pass at least 2 distinct devices "
                         "(on a CPU, dp_torch.virtual.install() provides vdev:0..N-1)")
    return device_list


def _virtual_devices(count: int) -> list[torch.device]:
    from dp_torch import virtual

    if not virtual.is_installed():
        virtual.install(max(count, 4))
    available = virtual.devices()
    if len(available) < count:
        raise ValueError(f"doctor: devices={count}, but this process has {len(available)} virtual devices "
                         f"(installed earlier); pass devices={len(available)} or fewer, or run in a new process")
    return available[:count]


class _ProbedDataParallel(dp_torch.DataParallel):
    """DataParallel whose parallel_apply step is watched; everything else is the stock pipeline."""

    def __init__(self, module: nn.Module, devices: list[torch.device], recorder: Recorder) -> None:
        super().__init__(module, device_ids=devices)
        self.recorder = recorder
        self.replicas_run = 0

    def parallel_apply(self, replicas, inputs, kwargs):
        devices = self.device_ids[: len(replicas)]
        self.replicas_run = len(replicas)
        shared = _prepare(self.recorder, replicas, devices)
        before = state_snapshot(replicas)
        containers = shared_containers(replicas[0])
        self.recorder.containers = [(c.path, c.container) for c in containers]
        remap = devices[0].type not in ("cuda", "cpu")
        turns = _Turns()
        probed = [_ProbedReplica(r, i, self.recorder, remap, turns) for i, r in enumerate(replicas)]
        try:
            return dp_torch.parallel_apply(probed, inputs, kwargs, devices)
        finally:
            _forget_replaced(self.recorder, shared)
            _note_filled(self.recorder, containers, len(replicas))
            for index, (replica, snapshot) in enumerate(zip(replicas, before)):
                for path, owner, name in assigned_since(snapshot, replica):
                    line = assignment_line(type(owner), name)
                    evidence = self.recorder.note("state-on-self", f"{path}.{name}" if path else name, index,
                                                  use=line)
                    evidence.detail["owner"] = owner


def _prepare(recorder: Recorder, replicas: list[nn.Module], devices: list[torch.device]) -> list[Shared]:
    """Record what replicate shared, and where each replica's parameters and buffers live."""
    tensors, modules = find_shared(replicas, devices)
    for kind, found in (("unreplicated-tensor", tensors), ("unreplicated-module", modules)):
        for shared in found:
            origin = Origin(kind, shared.path)
            owned = [shared.obj] if kind == "unreplicated-tensor" else [*shared.obj.parameters(), *shared.obj.buffers()]
            recorder.known.update((id(t), (t, origin)) for t in owned)
            for replica, device in shared.wrong_on.items():
                evidence = recorder.note(kind, shared.path, replica, [device])
                evidence.detail["obj"] = shared.obj
    recorder.slots = [[(path, memory_span(t), owned) for path, t, owned in registered_slots(r)] for r in replicas]
    return tensors


def _forget_replaced(recorder: Recorder, shared: list[Shared]) -> None:
    """A shared tensor that every replica replaced before reading it (a pre-hook's output) did no harm."""
    for item in shared:
        evidence = recorder.evidence.get(("unreplicated-tensor", item.path))
        if evidence is not None and not evidence.uses and item.replaced_on_every_replica():
            del recorder.evidence[("unreplicated-tensor", item.path)]


def _note_filled(recorder: Recorder, containers: list[SharedContainer], replicas: int) -> None:
    """A shared list or dict the replicas filled: every replica that ran used the one container."""
    for item in containers:
        if not item.filled():
            continue
        devices = {t.device for _, t in entries(item.path, item.container) if isinstance(t, torch.Tensor)}
        for index in range(replicas):
            evidence = recorder.note("shared-cache", item.path, index, devices)
        evidence.detail.update(container=item.container, filled_at=fill_line(type(item.owner), item.name))


class _Turns:
    """Replica i runs after replica i-1 has finished: one order, the same in every doctor run.

    A replica whose worker never calls it (a failure before the call) holds the next one up for at
    most `patience` seconds; then the runs overlap, as in DataParallel itself.
    """

    def __init__(self, patience: float = 60.0) -> None:
        self.patience = patience
        self.done_up_to = 0  # replicas below this index have finished
        self.condition = threading.Condition()

    @contextlib.contextmanager
    def turn(self, index: int):
        with self.condition:
            self.condition.wait_for(lambda: self.done_up_to >= index, timeout=self.patience)
        try:
            yield
        finally:
            with self.condition:
                self.done_up_to = max(self.done_up_to, index + 1)
                self.condition.notify_all()


class _ProbedReplica:
    """Calls a replica inside the probe modes, which are thread-local, so in its worker thread."""

    def __init__(self, module: nn.Module, index: int, recorder: Recorder, remap_cuda: bool, turns: _Turns) -> None:
        self.module, self.index, self.recorder, self.remap_cuda = module, index, recorder, remap_cuda
        self.turns = turns

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self.turns.turn(self.index), contextlib.ExitStack() as modes:
            if self.remap_cuda:
                modes.enter_context(CudaAsReplicaDevice(self.recorder.devices, self.index, self.recorder.renamed))
            modes.enter_context(ReplicaProbe(self.recorder, self.index))
            try:
                output = self.module(*args, **kwargs)
            except Exception as error:
                self.recorder.errors.append((error, error_line(error), self.index))
                raise
        _check_outputs(self.recorder, self.index, output)
        return output


def _check_outputs(recorder: Recorder, index: int, output: Any) -> None:
    """A returned tensor left on another device, with a known origin, is that origin's finding too."""
    device = recorder.devices[index]
    for leaf in tree_leaves(output):
        if isinstance(leaf, torch.Tensor) and leaf.device != device:
            origin = recorder.origin_of(leaf)
            if origin is not None:
                recorder.note(origin.kind, origin.where, index, [leaf.device], "returned from forward")


def _backward(output: Any, recorder: Recorder, notes: list[str]) -> None:
    if recorder.repairs:
        # The forward went on by moving tensors behind autograd's back; a backward through those
        # moves would fail (or crash) for reasons the findings already give.
        notes.append("--backward: skipped, since the forward mixed devices (see the findings); fix them and "
                     "run again to check the backward pass")
        return
    floats = [t for t in tree_leaves(output)
              if isinstance(t, torch.Tensor) and t.is_floating_point() and t.requires_grad]
    if not floats:
        notes.append("--backward: no floating output requires grad; backward skipped")
        return
    total = sum(t.sum().to(floats[0].device) for t in floats)
    with ReplicaProbe(recorder, None):
        total.backward()
