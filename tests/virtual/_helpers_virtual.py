"""Shared helpers for the virtual-device tests."""
from __future__ import annotations

import copy
import subprocess
import sys
import textwrap

import torch
from torch import nn

from dp_torch import virtual


def run_python(code: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter (vdev not installed), so an abort ends only that one."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=timeout)


def vdev(i: int) -> torch.device:
    return virtual.devices()[i]


def on_device(module: nn.Module, device) -> nn.Module:
    """A deep copy of `module` moved to `device` (the original stays put).

    `.to()` turns a buffer that requires grad into a non-leaf (on CUDA too); it is made a leaf
    again on `device` so its gradient can be compared.
    """
    moved = copy.deepcopy(module).to(device)
    for sub in moved.modules():
        for key, buf in sub._buffers.items():
            if buf is not None and buf.requires_grad and not buf.is_leaf:
                sub._buffers[key] = buf.detach().requires_grad_()
    return moved


def assert_close_to_cpu(cpu_tensor: torch.Tensor, other: torch.Tensor, device, **tol) -> None:
    assert other.device == torch.device(device), f"{other.device} != {device}"
    torch.testing.assert_close(other.cpu(), cpu_tensor, **tol)


def tensors_of(module: nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter and buffer by qualified name (tied ones under each name)."""
    named = dict(module.named_parameters(remove_duplicate=False))
    named.update(module.named_buffers(remove_duplicate=False))
    return named


def replica_tensors(original: nn.Module, replica: nn.Module) -> dict[str, torch.Tensor]:
    """Each replica tensor named like the original's parameter or buffer it copies.

    Replicas hold their parameters as plain attributes (not in `_parameters`), so the walk
    follows the original's module tree and reads the same attribute on the replica.
    """
    found = {}
    for path, sub in original.named_modules(remove_duplicate=False):
        replica_sub = replica.get_submodule(path)
        for key in [*sub._parameters, *sub._buffers]:
            value = getattr(replica_sub, key)
            if value is not None:
                found[f"{path}.{key}" if path else key] = value
    return found


def misplaced(original: nn.Module, replicas, devices) -> list[str]:
    """Every replica parameter or buffer that is not on its replica's device, as readable lines."""
    problems = []
    for i, (replica, device) in enumerate(zip(replicas, devices)):
        for name, t in replica_tensors(original, replica).items():
            if t.device != torch.device(device):
                problems.append(f"replica {i}: {name} on {t.device}, expected {device}")
    return problems
