"""Recorders shared by the oracle tests (stock torch.nn.parallel vs dp_torch on CPU)."""
from __future__ import annotations

import copy
import warnings
from collections import namedtuple
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils._pytree import tree_leaves, tree_map

Pair = namedtuple("Pair", ["first", "second"])


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


def assert_same_run(stock: Run, ours: Run, rtol: float = 1e-5, atol: float = 1e-6,
                    expect_error: type[Exception] | None = None) -> None:
    """Both runs agree: warnings, output structure/values, grads and state.

    Neither may raise unless ``expect_error`` names the type both must raise (sharing a wrong
    error is no agreement).
    """
    if expect_error is None:
        assert stock.error is None and ours.error is None, (
            f"unexpected error: stock raised {_summary(stock.error)}, dp_torch raised {_summary(ours.error)}")
    else:
        assert type(stock.error) is expect_error, f"stock raised {_summary(stock.error)}, expected {expect_error}"
        assert type(ours.error) is expect_error, f"dp_torch raised {_summary(ours.error)}, expected {expect_error}"
    assert ours.warnings == stock.warnings
    assert_same_tree(stock.output, ours.output, rtol, atol)
    assert ours.grads.keys() == stock.grads.keys()
    for name in stock.grads:
        assert_same_tree(stock.grads[name], ours.grads[name], rtol, atol, path=f"grad {name}")
    assert ours.state.keys() == stock.state.keys()
    for name in stock.state:
        assert_same_tree(stock.state[name], ours.state[name], rtol, atol, path=f"state {name}")


def _summary(error: BaseException | None) -> str:
    """The error's type and the last line of its message (a replica's error ends with its cause)."""
    if error is None:
        return "nothing"
    last_line = (str(error).strip().splitlines() or [""])[-1]
    return f"{type(error).__name__} ({last_line})"


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
