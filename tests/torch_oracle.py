"""Test-only oracle: PyTorch's own ``torch.nn.parallel`` Python code, running on CPU.

Upstream DataParallel needs CUDA for four C++ comm primitives, a few CPU asserts and the
``torch.accelerator`` stream/device helpers. ``stock_parallel_on_cpu()`` swaps exactly those
for CPU stand-ins, for one ``with`` block, so the stock scatter / replicate / parallel_apply /
gather run end to end on CPU and ``dp_torch`` can be compared with them on the same inputs.

Device model: every device index ``0..n_devices-1`` *is* the CPU. The stand-ins copy exactly
where the C++ copies between two tensors on one device: ``broadcast_coalesced`` returns the
inputs for ``devices[0]`` and fresh coalesced copies for the others, ``scatter`` keeps chunks as
views (each chunk is already on its target), ``gather`` concatenates into new memory.
See docs/oracle.md.
"""
from __future__ import annotations

import ast
import contextlib
import importlib
import inspect
import threading
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from unittest import mock

import pytest
import torch
from _oracle_stand_ins import (
    TorchView,
    accelerator_autocast_enabled,
    cpu_device,
    make_comm_stand_ins,
    make_fake_accelerator,
    reduce_add,
)

# importlib: `import torch.nn.parallel.replicate as m` would give the function, not the module.
stock_comm = importlib.import_module("torch.nn.parallel.comm")
stock_data_parallel = importlib.import_module("torch.nn.parallel.data_parallel")
stock_functions = importlib.import_module("torch.nn.parallel._functions")
stock_parallel_apply = importlib.import_module("torch.nn.parallel.parallel_apply")
stock_replicate = importlib.import_module("torch.nn.parallel.replicate")
stock_scatter_gather = importlib.import_module("torch.nn.parallel.scatter_gather")

_CPU_ASSERT_MARKER = "not implemented for CPU tensors"
_FUNCTION_NAMES = ("Broadcast", "ReduceAddCoalesced", "Gather", "Scatter")
_active_lock = threading.Lock()
_NO_STREAMS = types.SimpleNamespace(is_available=lambda: False)


# --- torch.nn.parallel._functions without its two CPU asserts ------------------------------

class _DropCpuAsserts(ast.NodeTransformer):
    """Removes `if ...: raise AssertionError("... not implemented for CPU tensors")`."""

    def __init__(self) -> None:
        self.removed = 0

    def visit_If(self, node: ast.If) -> ast.AST | None:
        if len(node.body) == 1 and isinstance(node.body[0], ast.Raise) and not node.orelse:
            if _CPU_ASSERT_MARKER in ast.unparse(node.body[0]):
                self.removed += 1
                return None
        return self.generic_visit(node)


_cpu_functions_module: types.ModuleType | None = None


def cpu_functions_module() -> types.ModuleType:
    """The installed ``_functions.py``, recompiled without the Broadcast/Gather CPU asserts.

    Everything else (autograd forward/backward, mark_non_differentiable, scalar unsqueeze) is
    the stock code, compiled under the stock file name so tracebacks show its real lines.
    """
    global _cpu_functions_module
    if _cpu_functions_module is None:
        path = inspect.getsourcefile(stock_functions)
        tree = ast.parse(inspect.getsource(stock_functions), filename=path)
        dropper = _DropCpuAsserts()
        tree = ast.fix_missing_locations(dropper.visit(tree))
        if dropper.removed != 2:  # Broadcast.forward and Gather.forward in torch 2.13
            raise RuntimeError(
                f"torch_oracle: expected 2 CPU asserts in {path}, found {dropper.removed}; "
                "the stock _functions.py changed, update the oracle"
            )
        module = types.ModuleType(stock_functions.__name__)
        module.__file__ = path
        exec(compile(tree, path, "exec"), module.__dict__)
        _cpu_functions_module = module
    return _cpu_functions_module


# --- the context manager and the fixture ----------------------------------------------------

@dataclass(frozen=True)
class StockParallel:
    """The stock torch.nn.parallel entry points, usable on CPU while the oracle is active."""

    scatter: Callable[..., Any]
    scatter_kwargs: Callable[..., Any]
    replicate: Callable[..., Any]
    parallel_apply: Callable[..., Any]
    gather: Callable[..., Any]
    data_parallel: Callable[..., Any]
    DataParallel: type
    n_devices: int

    def devices(self, n: int) -> list[int]:
        """Device ids for n replicas (all of them the CPU)."""
        return list(range(n))


def _patches(n_devices: int) -> list[Any]:
    functions = cpu_functions_module()
    accelerator = make_fake_accelerator(n_devices)
    patches = [mock.patch.object(torch._C, name, fn, create=True)
               for name, fn in make_comm_stand_ins(n_devices).items()]
    patches += [mock.patch.object(stock_functions, name, getattr(functions, name))
                for name in _FUNCTION_NAMES]
    patches += [
        # The CPU stand-in device has no streams, so Scatter takes its no-copy-stream path even where
        # an accelerator is registered (dp_torch.virtual's vdev makes torch.accelerator available).
        mock.patch.object(functions, "torch", TorchView(accelerator=_NO_STREAMS)),
        mock.patch.object(stock_scatter_gather, "Scatter", functions.Scatter),
        mock.patch.object(stock_scatter_gather, "Gather", functions.Gather),
        mock.patch.object(stock_comm, "reduce_add", reduce_add),
        mock.patch.object(stock_parallel_apply, "_get_device_index", accelerator.get_device_index),
        mock.patch.object(stock_parallel_apply, "torch", TorchView(
            accelerator=accelerator, is_autocast_enabled=accelerator_autocast_enabled)),
        mock.patch.object(stock_data_parallel, "_get_available_device_type", lambda: "cpu"),
        mock.patch.object(stock_data_parallel, "_get_all_device_indices",
                          lambda: list(range(n_devices))),
        mock.patch.object(stock_data_parallel, "torch", TorchView(device=cpu_device)),
    ]
    return patches


@contextlib.contextmanager
def stock_parallel_on_cpu(n_devices: int = 4) -> Iterator[StockParallel]:
    """Run stock ``torch.nn.parallel`` on CPU inside this block, with device ids 0..n_devices-1.

    Patches are module attributes (so parallel_apply's worker threads see them) and are all
    restored on exit. Not re-entrant: one oracle at a time per process.
    """
    if not _active_lock.acquire(blocking=False):
        raise RuntimeError("stock_parallel_on_cpu is already active; it cannot be nested")
    try:
        with contextlib.ExitStack() as stack:
            for patch in _patches(n_devices):
                stack.enter_context(patch)
            yield StockParallel(
                scatter=stock_scatter_gather.scatter,
                scatter_kwargs=stock_scatter_gather.scatter_kwargs,
                replicate=stock_replicate.replicate,
                parallel_apply=stock_parallel_apply.parallel_apply,
                gather=stock_scatter_gather.gather,
                data_parallel=stock_data_parallel.data_parallel,
                DataParallel=stock_data_parallel.DataParallel,
                n_devices=n_devices,
            )
    finally:
        _active_lock.release()


@pytest.fixture
def stock() -> Iterator[StockParallel]:
    """Stock torch.nn.parallel on CPU for the duration of one test (4 device ids)."""
    with stock_parallel_on_cpu() as parallel:
        yield parallel
