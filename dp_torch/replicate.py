"""replicate: one shallow copy of a module tree per device, wired to per-device parameters and buffers."""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from itertools import chain
from typing import TypeVar

import torch
from torch import nn

from dp_torch._devices import DeviceLike, resolve_devices
from dp_torch._functions import Broadcast, broadcast

__all__ = ["replicate"]

ModuleT = TypeVar("ModuleT", bound=nn.Module)


def replicate(module: ModuleT, devices: Sequence[DeviceLike], detach: bool = False) -> list[ModuleT]:
    """Return one replica of ``module`` per device; replica 0 shares storage with ``module``.

    Copies every parameter and buffer to devices[1:] (fresh copies even on the same device). With
    ``detach=False`` replicas are wired into autograd, so gradients sum back onto ``module``'s
    parameters; with ``detach=True`` replica 0 holds the very same Parameter objects.
    Replicas report no ``parameters()`` (like PyTorch's); attributes that are not parameters,
    buffers or children are shared by reference.
    """
    devices = resolve_devices(devices, "replicate: devices")
    if not devices:
        return []
    _check_on_first_device(module, devices[0])

    params = list(module.parameters())
    param_copies = _broadcast(params, devices, detach)
    # Buffers join the autograd graph only when they require grad (and we are not detaching).
    buffers = list(module.buffers())
    buffers_rg = [b for b in buffers if b.requires_grad and not detach]
    buffers_not_rg = [b for b in buffers if not (b.requires_grad and not detach)]
    buffer_copies = _broadcast(buffers_rg, devices, detach=False)
    buffer_copies_not_rg = _broadcast(buffers_not_rg, devices, detach=True)
    # Per device: original tensor -> its copy (keyed by identity, so tied weights stay tied).
    copy_of = [
        _by_identity(params, param_copies[j])
        | _by_identity(buffers_rg, buffer_copies[j])
        | _by_identity(buffers_not_rg, buffer_copies_not_rg[j])
        for j in range(len(devices))
    ]

    modules = list(module.modules())
    module_copies = [[_shallow_replica(m) for m in modules] for _ in devices]
    index_of = {id(m): i for i, m in enumerate(modules)}
    for j, replicas in enumerate(module_copies):
        for original, replica in zip(modules, replicas):
            _wire(original, replica, replicas, index_of, copy_of[j])
    return [replicas[0] for replicas in module_copies]


def _check_on_first_device(module: nn.Module, device: torch.device) -> None:
    named = chain(module.named_parameters(), module.named_buffers())
    for name, tensor in named:
        if tensor.device != device:
            raise RuntimeError(
                f"replicate: {name} is on {tensor.device} but devices[0] is {device}; "
                f"all parameters and buffers must be on devices[0]: call module.to({str(device)!r}) first"
            )


def _broadcast(tensors: list[torch.Tensor], devices: list[torch.device], detach: bool) -> list[list[torch.Tensor]]:
    """``copies[j][k]`` = tensors[k] on devices[j]; autograd-connected unless ``detach``."""
    if not tensors:
        return [[] for _ in devices]
    if detach:
        return broadcast(tensors, devices)
    flat = Broadcast.apply(devices, *tensors)
    n = len(tensors)
    return [list(flat[i : i + n]) for i in range(0, len(flat), n)]


def _by_identity(originals: list[torch.Tensor], copies: list[torch.Tensor]) -> dict[int, torch.Tensor]:
    return {id(t): c for t, c in zip(originals, copies)}


def _shallow_replica(module: nn.Module) -> nn.Module:
    replica = module._replicate_for_data_parallel()  # sets _is_replica, empties _parameters
    replica._former_parameters = OrderedDict()
    return replica


def _wire(
    original: nn.Module,
    replica: nn.Module,
    replicas: list[nn.Module],
    index_of: dict[int, int],
    copy_of: dict[int, torch.Tensor],
) -> None:
    """Point ``replica``'s children, parameters and buffers at this device's copies."""
    for key, child in original._modules.items():
        if child is None:
            replica._modules[key] = None
        else:
            setattr(replica, key, replicas[index_of[id(child)]])
    for key, param in original._parameters.items():
        if param is None:
            replica._parameters[key] = None
        else:
            # A plain tensor lands in __dict__ (parameters() stays empty); a Parameter (detach,
            # replica 0) is registered, as in PyTorch.
            setattr(replica, key, copy_of[id(param)])
            replica._former_parameters[key] = copy_of[id(param)]
    for key, buf in original._buffers.items():
        if buf is None:
            replica._buffers[key] = None
        else:
            setattr(replica, key, copy_of[id(buf)])
