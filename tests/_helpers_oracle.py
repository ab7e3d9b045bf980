"""Models and recorders shared by the oracle tests (stock torch.nn.parallel vs dp_torch on CPU)."""
from __future__ import annotations

import copy
import warnings
from collections import namedtuple
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn
from torch.utils._pytree import tree_leaves, tree_map

Pair = namedtuple("Pair", ["first", "second"])


# --- models ---------------------------------------------------------------------------------

class MLP(nn.Module):
    """Linear over the last dim: works for batch on dim 0 or dim 1."""

    def __init__(self, features: int = 6, hidden: int = 10, out: int = 3) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(features, hidden), nn.Tanh(), nn.Linear(hidden, out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class ConvBN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.bn(self.conv(x))).mean(dim=(2, 3)))


class LSTMNet(nn.Module):
    """nn.LSTM inside a module; batch_first=True takes (B,T,F), False takes (T,B,F) (dim 1)."""

    def __init__(self, batch_first: bool = True) -> None:
        super().__init__()
        self.lstm = nn.LSTM(5, 7, batch_first=batch_first)
        self.head = nn.Linear(7, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x)
        return self.head(out)


class Tied(nn.Module):
    """Encoder and decoder share one weight (the same Parameter under two names)."""

    def __init__(self) -> None:
        super().__init__()
        self.encode = nn.Linear(6, 6)
        self.decode = nn.Linear(6, 6)
        self.decode.weight = self.encode.weight
        self.shared = self.encode  # one child under two names

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decode(torch.tanh(self.shared(x))) + self.encode.weight.sum()


class BufferWithGrad(nn.Module):
    """A buffer that requires grad: replicas get it through autograd and it receives summed grads."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(6, 3)
        self.register_buffer("scale", torch.linspace(0.5, 1.5, 3).requires_grad_())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * self.scale


MODELS: dict[str, Callable[[], nn.Module]] = {
    "mlp": MLP,
    "conv_bn": ConvBN,
    "lstm": LSTMNet,
    "tied": Tied,
    "buffer_rg": BufferWithGrad,
}


def model_input(name: str, batch: int, generator: torch.Generator, dim: int = 0) -> torch.Tensor:
    """A random input for MODELS[name] with the batch along ``dim``."""
    shapes = {"mlp": (batch, 6), "conv_bn": (batch, 3, 5, 5), "lstm": (batch, 4, 5),
              "tied": (batch, 6), "buffer_rg": (batch, 6)}
    shape = list(shapes[name])
    if dim == 1:  # (T, B, F) or (extra, B, F): the batch moves to dim 1
        shape = [3, batch] + shape[2:] if name == "lstm" else [2, batch] + shape[1:]
    return torch.randn(*shape, generator=generator)


def make_model(name: str, seed: int, dim: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    model = LSTMNet(batch_first=False) if (name == "lstm" and dim == 1) else MODELS[name]()
    return model.train()


# --- recording one run ----------------------------------------------------------------------

@dataclass
class Run:
    """What one DataParallel forward (+ backward) did, in comparable form."""

    output: Any = None
    grads: dict[str, torch.Tensor | None] = field(default_factory=dict)
    state: dict[str, torch.Tensor] = field(default_factory=dict)
    warnings: list[tuple[type, str]] = field(default_factory=list)
    error: BaseException | None = None


def weighted_sum(output: Any, generator_seed: int = 1234) -> torch.Tensor:
    """A scalar loss that weighs every output element differently (so grads are not trivial)."""
    g = torch.Generator().manual_seed(generator_seed)
    leaves = [t for t in tree_leaves(output) if isinstance(t, torch.Tensor) and t.is_floating_point()]
    return sum((t * torch.randn(t.shape, generator=g)).sum() for t in leaves)


def record(call: Callable[[], Any], module: nn.Module, backward: bool = True) -> Run:
    """Run ``call()``; then backward of weighted_sum; snapshot grads and state of ``module``."""
    run = Run()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            out = call()
        except Exception as err:  # noqa: BLE001 - the error is part of the record
            run.error = err
            out = None
    run.warnings = [(w.category, str(w.message)) for w in caught]
    if run.error is None:
        if backward and any(isinstance(t, torch.Tensor) and t.requires_grad for t in tree_leaves(out)):
            weighted_sum(out).backward()
        run.output = tree_map(lambda t: t.detach().clone() if isinstance(t, torch.Tensor) else t, out)
    named = dict(module.named_parameters()) | {n: b for n, b in module.named_buffers() if b.requires_grad}
    run.grads = {n: (None if p.grad is None else p.grad.clone()) for n, p in named.items()}
    run.state = {n: t.detach().clone() for n, t in module.state_dict(keep_vars=True).items()}
    return run


def assert_same_run(stock: Run, ours: Run, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Both runs agree: error type, warnings, output structure/values, grads and state."""
    assert type(ours.error) is type(stock.error), (stock.error, ours.error)
    assert ours.warnings == stock.warnings
    assert_same_tree(stock.output, ours.output, rtol, atol)
    assert ours.grads.keys() == stock.grads.keys()
    for name in stock.grads:
        assert_same_tree(stock.grads[name], ours.grads[name], rtol, atol, path=f"grad {name}")
    assert ours.state.keys() == stock.state.keys()
    for name in stock.state:
        assert_same_tree(stock.state[name], ours.state[name], rtol, atol, path=f"state {name}")


def assert_same_tree(expected: Any, actual: Any, rtol: float, atol: float, path: str = "out") -> None:
    assert type(actual) is type(expected), f"{path}: {type(expected)} vs {type(actual)}"
    if isinstance(expected, torch.Tensor):
        assert actual.dtype == expected.dtype and actual.device == expected.device, path
        torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, msg=path)
    elif isinstance(expected, dict):
        assert list(actual) == list(expected), path
        for key in expected:
            assert_same_tree(expected[key], actual[key], rtol, atol, f"{path}[{key!r}]")
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), path
        for i, (e, a) in enumerate(zip(expected, actual)):
            assert_same_tree(e, a, rtol, atol, f"{path}[{i}]")
    else:
        assert actual == expected, path


def twin_models(factory: Callable[[], nn.Module]) -> tuple[nn.Module, nn.Module]:
    """Two identical, independent copies (one for stock, one for dp_torch)."""
    model = factory()
    return model, copy.deepcopy(model)


# --- aliasing -------------------------------------------------------------------------------

def aliasing(original: torch.Tensor, copy_: torch.Tensor) -> str:
    """'same' (one object), 'shares' (same storage) or 'copy'."""
    if copy_ is original:
        return "same"
    if copy_.untyped_storage().data_ptr() == original.untyped_storage().data_ptr():
        return "shares"
    return "copy"


def replica_tensor(replica: nn.Module, name: str) -> torch.Tensor:
    owner, _, attr = name.rpartition(".")
    return getattr(replica.get_submodule(owner) if owner else replica, attr)


def aliasing_table(module: nn.Module, replicas: list[nn.Module]) -> dict[str, list[tuple]]:
    """Per tensor name: per replica (aliasing, requires_grad, is Parameter, is leaf)."""
    names = dict(module.named_parameters(remove_duplicate=False))
    names |= dict(module.named_buffers(remove_duplicate=False))
    table = {}
    for name, original in names.items():
        row = []
        for replica in replicas:
            t = replica_tensor(replica, name)
            row.append((aliasing(original, t), t.requires_grad, isinstance(t, nn.Parameter), t.is_leaf))
        table[name] = row
    return table
