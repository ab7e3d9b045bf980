"""Broken (and sound) models for the doctor's tests: each broken one triggers exactly one kind.

A line the doctor should point at carries the comment `# doctor: <kind>`; the tests find the line
number from that marker, so the expectation does not come from the doctor's own code.
"""
import time

import torch
import torch.nn.functional as F
from torch import nn

COUNTER = torch.zeros(3)  # moved to vdev:0 by the test that uses GlobalOffset


class PlainAttribute(nn.Module):
    """`scale` is a plain attribute: shared from device 0 (unreplicated-tensor)."""

    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(3, 4), Scaled())

    def forward(self, x):
        return self.encoder(x)


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = [torch.ones(4), torch.full((4,), 2.0)]  # a list of tensors: not buffers

    def forward(self, x):
        return x * self.scale[1]


class TupleAttribute(nn.Module):
    """`bounds` is a tuple of tensors on self: shared from device 0 like a list (unreplicated-tensor)."""

    def __init__(self, low: float, high: float):
        super().__init__()
        self.fc = nn.Linear(3, 4)
        self.bounds = (torch.full((4,), low), torch.full((4,), high))

    def forward(self, x):
        return self.fc(x).clamp(min=-1.0) * self.bounds[1]  # doctor: unreplicated-tensor (tuple)


class ScalarAttribute(nn.Module):
    """A 0-dim CPU tensor on self: every device's ops take it as a scalar, as CUDA's do (clean)."""

    def __init__(self, temperature: float):
        super().__init__()
        self.fc = nn.Linear(3, 4)
        self.temperature = torch.tensor(temperature)

    def forward(self, x):
        return self.fc(x) / self.temperature


class ListOfLayers(nn.Module):
    """Sub-modules in a plain list (unreplicated-module)."""

    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(3, 4)
        self.layers = [nn.Linear(4, 4), nn.Linear(4, 4)]

    def forward(self, x):
        x = self.inp(x)
        for layer in self.layers:
            x = layer(x)
        return x


class FixedDevice(nn.Module):
    """A tensor made in forward with no device= (fixed-device-creation)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 4)

    def forward(self, x):
        noise = torch.ones(x.shape[0], 4)  # doctor: fixed-device-creation
        return self.fc(x) + noise


class CudaZero(nn.Module):
    """A tensor made in forward on "cuda:0" (fixed-device-creation on replicas 1..)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 4)

    def forward(self, x):
        bias = torch.ones(4, device="cuda:0")  # doctor: fixed-device-creation
        return self.fc(x) + bias


class CudaCurrent(nn.Module):
    """`.cuda()` and device="cuda" in forward: the replica's own device under DataParallel (clean)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 4)

    def forward(self, x):
        return self.fc(x) + torch.ones(4).cuda() + torch.zeros(4, device="cuda")


class GlobalOffset(nn.Module):
    """A module-level tensor on device 0 used in forward (cross-device-op)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        return self.fc(x) - COUNTER  # doctor: cross-device-op


class _ScaleGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad * torch.full((grad.shape[1],), 0.5)  # doctor: cross-device-op (backward)


class BackwardOnCpu(nn.Module):
    """A custom autograd Function whose backward makes a CPU tensor (cross-device-op in backward)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, x):
        return _ScaleGrad.apply(self.fc(x))


class StepCounter(nn.Module):
    """A buffer incremented in place in forward (lost-inplace-update on replicas 1..)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls += 1  # doctor: lost-inplace-update
        return self.fc(x)


class CachesOutput(nn.Module):
    """Stores its output on self (state-on-self)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, x):
        out = self.fc(x)
        self.last_output = out  # doctor: state-on-self
        return out


class WeightCache(nn.Module):
    """A dict on self filled in forward with a tensor of the replica that got there first (shared-cache)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)
        self.cache = {}

    def forward(self, x):
        if "w" not in self.cache:
            self.cache["w"] = self.fc.weight.t() * 2  # doctor: shared-cache
        return x @ self.cache["w"]


class SlowToFill(nn.Module):
    """A dict on self filled after a pause: run at once, every replica finds it empty (shared-cache)."""

    def __init__(self, pause: float):
        super().__init__()
        self.fc = nn.Linear(3, 2)
        self.cache = {}
        self.pause = pause

    def forward(self, x):
        if "bias" not in self.cache:
            time.sleep(self.pause)  # every replica's thread gets here before any fills the cache
            self.cache["bias"] = torch.ones(2, device=x.device)
        return self.fc(x) + self.cache["bias"]


class KeepsInputs(nn.Module):
    """A list on self that every replica appends to in forward (shared-cache)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)
        self.seen = []

    def forward(self, x):
        self.seen.append(x.detach())  # doctor: shared-cache
        return self.fc(x)


class CacheByDevice(nn.Module):
    """A dict on self keyed by the replica's device: each replica reads its own entry (clean)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)
        self.cache = {}

    def forward(self, x):
        if x.device not in self.cache:
            self.cache[x.device] = torch.arange(2.0, device=x.device)
        return self.fc(x) + self.cache[x.device]


class BatchSized(nn.Module):
    """Reshapes with the global batch size, which each replica does not have (run-error)."""

    def forward(self, x):
        return x.reshape(8, -1)  # doctor: run-error


class WithBatchNorm(nn.Module):
    """BatchNorm in training mode: replica 0's running statistics are kept, by design (clean)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 4)
        self.bn = nn.BatchNorm1d(4)

    def forward(self, x):
        return self.bn(self.fc(x))


class FunctionalBatchNorm(nn.BatchNorm2d):
    """timm's pattern: a BatchNorm subclass with its own forward calling F.batch_norm (clean)."""

    def forward(self, x):
        if self.training:
            self.num_batches_tracked.add_(1)
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, self.training,
                            self.momentum, self.eps)


class SuperBatchNorm(nn.BatchNorm2d):
    """A BatchNorm subclass whose forward calls super().forward (clean)."""

    def forward(self, x):
        return super().forward(x).relu()


class CountingBatchNorm(nn.BatchNorm2d):
    """A BatchNorm subclass with a buffer of its own, written in place (lost-inplace-update)."""

    def __init__(self, channels):
        super().__init__(channels)
        self.register_buffer("seen", torch.zeros(()))

    def forward(self, x):
        self.seen += x.shape[0]  # doctor: lost-inplace-update (BatchNorm subclass)
        return super().forward(x)


class BatchNormSubclasses(nn.Module):
    """Stock BatchNorm beside two subclasses of it; `counted=True` adds one with its own counter."""

    def __init__(self, counted: bool = False):
        super().__init__()
        self.functional = FunctionalBatchNorm(3)
        self.calls_super = SuperBatchNorm(3)
        self.stock = nn.BatchNorm2d(3)
        self.counted = CountingBatchNorm(3) if counted else nn.Identity()

    def forward(self, x):
        return self.counted(self.stock(self.calls_super(self.functional(x))))


class Sound(nn.Module):
    """Everything registered, everything made on the input's device (clean)."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(3, 3) for _ in range(2))
        self.register_buffer("scale", torch.full((3,), 0.5), persistent=False)

    def forward(self, x):
        for block in self.blocks:
            x = block(x) * self.scale
        return x + torch.arange(3, device=x.device)


def mlp(depth: int = 10, width: int = 64) -> nn.Module:
    """A depth-layer MLP, for the cost measurement."""
    layers = [m for _ in range(depth) for m in (nn.Linear(width, width), nn.ReLU())]
    return nn.Sequential(*layers)
