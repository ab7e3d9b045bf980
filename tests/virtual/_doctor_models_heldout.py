"""A held-out set for the doctor: hazards it must report with the right kind, sound models it must not.

Written apart from _doctor_models.py (beside this file), in the shapes real models take (timm's BatchNorm
subclasses, caches, parametrize, ModuleDict). tests/virtual/test_doctor_heldout.py runs each under
the doctor and under stock nn.DataParallel, so every label is what DataParallel really does.
"""
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrize

PADDING_MASK = torch.tensor([1.0, 1.0, 0.0, 1.0])  # a module-level tensor on the CPU


class Symmetric(nn.Module):
    """A parametrization: the weight's upper triangle, mirrored."""

    def forward(self, weight):
        return weight.triu() + weight.triu(1).transpose(0, 1)


class Parametrized(nn.Module):
    """A Linear whose weight goes through `parametrization` (torch.nn.utils.parametrize)."""

    parametrization: type[nn.Module] = Symmetric

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        parametrize.register_parametrization(self.fc, "weight", self.parametrization())

    def forward(self, x):
        return self.fc(x)


class NormAfterLinear(nn.Module):
    """A Linear, then a normalisation layer of class `norm_class`."""

    norm_class: type[nn.Module] = nn.BatchNorm1d

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.norm = self.norm_class(4)

    def forward(self, x):
        return self.norm(self.fc(x))


# --- hazards ------------------------------------------------------------------------------------

class PositionCache(nn.Module):
    """Caches a positional table per length in a dict: the first replica's table on its device."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.tables = {}

    def forward(self, x):
        length = x.shape[1]
        if length not in self.tables:
            self.tables[length] = torch.linspace(0, 1, length, device=x.device)
        return self.proj(x + self.tables[length])


class AttentionMemory(nn.Module):
    """Keeps past keys in a list inside a dict, in a sub-module (a shared memory bank)."""

    def __init__(self):
        super().__init__()
        self.key = nn.Linear(4, 4)
        self.memory = {"keys": []}

    def forward(self, x):
        keys = self.key(x)
        self.memory["keys"].append(keys.detach())
        return keys


class WithMemory(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = AttentionMemory()

    def forward(self, x):
        return self.attn(x).tanh()


class TupleOfStatistics(nn.Module):
    """Normalises with (mean, std) kept as a tuple of plain tensors."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.stats = (torch.zeros(4), torch.ones(4))

    def forward(self, x):
        mean, std = self.stats
        return self.fc((x - mean) / std)


class DictOfTables(nn.Module):
    """Embedding-like lookup tables kept in a plain dict of tensors."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.tables = {"scale": torch.full((4,), 0.5)}

    def forward(self, x):
        return self.fc(x) * self.tables["scale"]


class HeadsInDict(nn.Module):
    """Task heads in a plain dict, not an nn.ModuleDict."""

    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 4)
        self.heads = {"cls": nn.Linear(4, 2)}

    def forward(self, x):
        return self.heads["cls"](self.body(x))


class LazyHead(nn.Module):
    """Builds its head on the first forward and stores it on self."""

    def __init__(self):
        super().__init__()
        self.body = nn.Linear(4, 4)
        self.head = None

    def forward(self, x):
        if self.head is None:
            self.head = nn.Linear(4, 2).to(x.device)
        return self.head(self.body(x))


class ExponentialAverage(nn.Module):
    """A buffer of its own, an exponential moving average of the features, updated in place."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.register_buffer("average", torch.zeros(4))

    def forward(self, x):
        h = self.fc(x)
        with torch.no_grad():
            self.average.mul_(0.9).add_(0.1 * h.mean(0))
        return h


class RebindsBuffer(nn.Module):
    """Rebinds a registered buffer in forward (`self.ema = ...`), where the in-place form was meant."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.register_buffer("ema", torch.zeros(4))

    def forward(self, x):
        h = self.fc(x)
        self.ema = 0.9 * self.ema + 0.1 * h.detach().mean(0)
        return h


class CountingParametrization(Symmetric):
    """A parametrization that counts its calls in a buffer of its own (`runs`, on the class, counts all)."""

    runs = 0

    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, weight):
        type(self).runs += 1
        self.calls.add_(1)
        return super().forward(weight)


class CountingParametrized(Parametrized):
    parametrization = CountingParametrization


class GlobalMask(nn.Module):
    """Multiplies by a module-level CPU tensor."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x) * PADDING_MASK  # doctor: cross-device-op


class NoiseOnTheCpu(nn.Module):
    """Adds noise made with no device= (the CPU)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x) + 0.01 * torch.rand(x.shape[0], 4)  # doctor: fixed-device-creation


class LayerMadeInForward(nn.Module):
    """Creates a layer in forward and calls it: its weights are made on the CPU."""

    def forward(self, x):
        return nn.Linear(4, 2)(x)  # doctor: fixed-device-creation (layer)


class BatchNormWithOwnStatistic(nn.BatchNorm1d):
    """timm-style BatchNorm subclass that adds a statistic of its own, copied into a buffer."""

    def __init__(self, features):
        super().__init__(features)
        self.register_buffer("peak", torch.zeros(features))

    def forward(self, x):
        if self.training:
            self.peak.copy_(torch.maximum(self.peak, x.detach().abs().amax(0)))
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, self.training,
                            self.momentum, self.eps)


class WithOwnStatistic(NormAfterLinear):
    norm_class = BatchNormWithOwnStatistic


class RememberedOutput(nn.Module):
    """Stores the features of the last call for a loss term computed later."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        self.features = self.fc(x)
        return self.features.relu()


# --- sound models -------------------------------------------------------------------------------

class TimmBatchNorm2d(nn.BatchNorm2d):
    """timm's BatchNormAct2d shape: F.batch_norm, then an activation, its own forward."""

    def forward(self, x):
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
        x = F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, self.training,
                         self.momentum, self.eps)
        return F.relu(x)


class ConvTimmNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.norm = TimmBatchNorm2d(4)
        self.stock = nn.BatchNorm2d(4)

    def forward(self, x):
        return self.stock(self.norm(self.conv(x)))


class SuperInstanceNorm(nn.InstanceNorm1d):
    """An InstanceNorm with running statistics, subclassed, calling super().forward."""

    def __init__(self, features):
        super().__init__(features, affine=True, track_running_stats=True)

    def forward(self, x):
        return super().forward(x.unsqueeze(-1).expand(-1, -1, 3)).mean(-1)


class WithInstanceNorm(NormAfterLinear):
    norm_class = SuperInstanceNorm


class CachePerDevice(nn.Module):
    """A cache keyed by (device, length): each replica fills and reads its own entry."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.tables = {}

    def forward(self, x):
        key = (x.device, x.shape[1])
        if key not in self.tables:
            self.tables[key] = torch.linspace(0, 1, x.shape[1], device=x.device)
        return self.proj(x + self.tables[key])


class BuffersPerEntry(nn.Module):
    """A list of tensors registered as one buffer per entry, with plain Python settings beside them."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        for i, value in enumerate((0.5, 2.0)):
            self.register_buffer(f"scale_{i}", torch.full((4,), value), persistent=False)
        self.kernel = (3, 3)
        self.config = {"residual": True, "names": ["a", "b"]}

    def forward(self, x):
        h = self.fc(x) * self.scale_0 * self.scale_1
        return h + x if self.config["residual"] else h


class SymmetricLinear(Parametrized):
    """torch.nn.utils.parametrize with a stateless parametrization."""

    parametrization = Symmetric


class ListsAndDictsOfLayers(nn.Module):
    """nn.ModuleList and nn.ModuleDict, and a plain list of activations (no tensors)."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(4, 4) for _ in range(2))
        self.heads = nn.ModuleDict({"cls": nn.Linear(4, 2), "reg": nn.Linear(4, 1)})
        self.acts = [nn.ReLU(), nn.Tanh()]

    def forward(self, x):
        for block, act in zip(self.blocks, self.acts):
            x = act(block(x))
        return torch.cat([self.heads["cls"](x), self.heads["reg"](x)], dim=1)


class MadeOnTheInputsDevice(nn.Module):
    """Tensors made in forward on the input's device, in the usual spellings."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        positions = torch.arange(4, device=x.device, dtype=x.dtype)
        ones = x.new_ones(x.shape[0], 4)
        zeros = torch.zeros_like(x)
        return self.fc(x + zeros) + positions * ones + torch.full_like(x, 0.5)


class StatelessLayersInForward(nn.Module):
    """Creates layers with no tensors in forward (dropout off, an activation): nothing to place."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return nn.Dropout(p=0.0)(nn.GELU()(self.fc(x)))


class ScalarSettings(nn.Module):
    """0-dim CPU tensors as temperature and margin: scalars on every device."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.temperature = torch.tensor(2.0)
        self.margins = (torch.tensor(0.1), torch.tensor(0.2))

    def forward(self, x):
        return self.fc(x) / self.temperature - self.margins[0] + self.margins[1]


class TiedAndInPlace(nn.Module):
    """Tied weights, and in-place ops on tensors made in forward (not on parameters or buffers)."""

    def __init__(self):
        super().__init__()
        self.encode = nn.Linear(4, 4, bias=False)
        self.decode = nn.Linear(4, 4, bias=False)
        self.decode.weight = self.encode.weight

    def forward(self, x):
        h = self.encode(x) * 1.0
        h.add_(1.0)
        h.mul_(2.0)
        return self.decode(h)


class ParameterContainers(nn.Module):
    """nn.ParameterList and nn.ParameterDict: registered, so replicated like any parameter."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.gains = nn.ParameterList(nn.Parameter(torch.full((4,), g)) for g in (0.5, 1.5))
        self.offsets = nn.ParameterDict({"shift": nn.Parameter(torch.zeros(4))})

    def forward(self, x):
        return self.fc(x) * self.gains[0] * self.gains[1] + self.offsets["shift"]


class ReadsRegisteredMask(nn.Module):
    """A mask registered as a buffer (the fix for GlobalMask) and read, never written."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.register_buffer("mask", PADDING_MASK.clone(), persistent=False)

    def forward(self, x):
        return self.fc(x) * self.mask
