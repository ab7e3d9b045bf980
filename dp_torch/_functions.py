"""Autograd Functions that move tensors between devices: Broadcast, ReduceAddCoalesced, Scatter, Gather.

Python equivalents of torch.nn.parallel._functions built from ``.to`` / ``chunk`` / ``cat`` / ``+``
instead of CUDA-only C++ comm calls, so they run on any device type, ``cpu`` included. Each one's
backward is another of them, so double backward works.
"""
from __future__ import annotations

import warnings
from collections.abc import Sequence

import torch
from torch.autograd import Function

SCALAR_GATHER_WARNING = (
    "Was asked to gather along dimension 0, but all input tensors were scalars; "
    "will instead unsqueeze and return a vector."
)


def broadcast(tensors: Sequence[torch.Tensor], devices: Sequence[torch.device]) -> list[list[torch.Tensor]]:
    """``copies[j][k]`` = tensor k on devices[j]; j=0 is the tensors themselves (as C++ comm does).

    Copies for j >= 1 are always fresh tensors, even when devices[j] equals the source device.
    """
    copies = [list(tensors)]
    for device in devices[1:]:
        copies.append([t.detach().to(device, copy=True) for t in tensors])
    return copies


def reduce_add(tensors: Sequence[torch.Tensor], destination: torch.device) -> torch.Tensor:
    """Sum tensors from several devices onto ``destination`` (in replica order)."""
    total = tensors[0].to(destination)
    for t in tensors[1:]:
        total = total + t.to(destination)
    return total


class Broadcast(Function):
    """Copy every input to every device; backward sums the per-device gradients."""

    @staticmethod
    def forward(ctx, devices: Sequence[torch.device], *inputs: torch.Tensor):
        if not inputs:
            return ()
        ctx.num_inputs = len(inputs)
        ctx.input_device = inputs[0].device
        copies = broadcast(inputs, devices)
        frozen = [
            copy[k] for k, needs_grad in enumerate(ctx.needs_input_grad[1:]) if not needs_grad for copy in copies
        ]
        ctx.mark_non_differentiable(*frozen)
        return tuple(t for copy in copies for t in copy)

    @staticmethod
    def backward(ctx, *grad_outputs: torch.Tensor):
        return (None,) + ReduceAddCoalesced.apply(ctx.input_device, ctx.num_inputs, *grad_outputs)


class ReduceAddCoalesced(Function):
    """Sum ``grads`` (num_inputs per device, device-major) onto ``destination``; backward broadcasts."""

    @staticmethod
    def forward(ctx, destination: torch.device, num_inputs: int, *grads: torch.Tensor):
        per_device = [grads[i : i + num_inputs] for i in range(0, len(grads), num_inputs)]
        ctx.source_devices = [group[0].device for group in per_device]
        return tuple(reduce_add(same_input, destination) for same_input in zip(*per_device))

    @staticmethod
    def backward(ctx, *grad_outputs: torch.Tensor):
        return (None, None) + Broadcast.apply(ctx.source_devices, *grad_outputs)


class Scatter(Function):
    """Split ``input`` along ``dim`` (torch.chunk sizes, or ``chunk_sizes``); piece i goes to devices[i].

    A piece already on its device is a view of ``input``; backward gathers onto the input's device.
    """

    @staticmethod
    def forward(ctx, devices: Sequence[torch.device], chunk_sizes: Sequence[int] | None, dim: int, input: torch.Tensor):
        ctx.dim = dim
        ctx.input_device = input.device
        if chunk_sizes is None:
            pieces = input.chunk(len(devices), dim)
        else:
            pieces = input.split(list(chunk_sizes), dim)
        return tuple(piece if piece.device == device else piece.to(device) for piece, device in zip(pieces, devices))

    @staticmethod
    def backward(ctx, *grad_outputs: torch.Tensor):
        return (None, None, None, Gather.apply(ctx.input_device, ctx.dim, *grad_outputs))


class Gather(Function):
    """Concatenate ``inputs`` along ``dim`` on ``target_device``; all-scalar inputs become a vector.

    Backward splits the gradient with the recorded sizes and sends each piece back to its device.
    """

    @staticmethod
    def forward(ctx, target_device: torch.device, dim: int, *inputs: torch.Tensor):
        ctx.dim = dim
        ctx.input_devices = tuple(t.device for t in inputs)
        ctx.unsqueezed_scalar = dim == 0 and all(t.dim() == 0 for t in inputs)
        if ctx.unsqueezed_scalar:
            inputs = tuple(t.view(1) for t in inputs)
            warnings.warn(SCALAR_GATHER_WARNING, stacklevel=2)
        ctx.input_sizes = tuple(t.size(dim) for t in inputs)
        return torch.cat([t.to(target_device) for t in inputs], dim)

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        grads = Scatter.apply(ctx.input_devices, ctx.input_sizes, ctx.dim, grad_output)
        if ctx.unsqueezed_scalar:
            grads = tuple(g[0] for g in grads)
        return (None, None) + tuple(grads)
