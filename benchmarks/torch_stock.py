"""Section 2: dp_torch against stock torch.nn.parallel on the same module and batch.

On CPU the stock code runs through the test-only oracle (tests/torch_oracle.py): PyTorch's own
Python scatter/replicate/parallel_apply/gather with Python stand-ins for its CUDA-only C++ comm
primitives; every device index is the CPU, as for dp_torch's ["cpu"] * n. On --device gpu both
run on the CUDA devices. Each figure is t(dp_torch) / t(stock), alternating.
"""
from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from benchmarks.context import Context
from benchmarks.models import torch_model_and_batch
from benchmarks.results import Section
from benchmarks.timing import measure_ratio

TARGET = 1.0
TESTS = Path(__file__).resolve().parents[1] / "tests"


@contextlib.contextmanager
def stock_parallel(ctx: Context, n: int) -> Iterator[tuple[Any, list, list]]:
    """(stock torch.nn.parallel namespace, its device ids, dp_torch's devices) for n replicas."""
    import torch

    if ctx.device == "gpu":
        yield torch.nn.parallel, list(range(n)), ctx.torch_devices(n)
        return
    sys.path.insert(0, str(TESTS))
    try:
        from torch_oracle import stock_parallel_on_cpu
    finally:
        sys.path.remove(str(TESTS))
    with stock_parallel_on_cpu(n) as stock:
        yield stock, stock.devices(n), [torch.device("cpu")] * n


def step_thunks(dp: Any, module: Any, x: Any, devices: list, sync: Callable[[], None]) -> dict[str, Callable[[], Any]]:
    """One thunk per pipeline step and for a whole fwd+bwd, through `dp` (dp_torch or stock)."""
    import torch

    inputs = dp.scatter((x,), devices)
    replicas = dp.replicate(module, devices[: len(inputs)])
    outputs = dp.parallel_apply(replicas, inputs, None, devices[: len(inputs)])

    def fwd_bwd() -> None:
        module.zero_grad(set_to_none=True)
        dp.data_parallel(module, x, devices).pow(2).mean().backward()
        sync()

    def forward() -> None:
        with torch.no_grad():
            dp.data_parallel(module, x, devices)
        sync()

    return {
        "fwd+bwd": fwd_bwd,
        "fwd (no_grad)": forward,
        "scatter": lambda: (dp.scatter((x,), devices), sync()),
        "replicate": lambda: (dp.replicate(module, devices[: len(inputs)]), sync()),
        "parallel_apply": lambda: (dp.parallel_apply(replicas, inputs, None, devices[: len(inputs)]), sync()),
        "gather": lambda: (dp.gather(outputs, devices[0]), sync()),
    }


def run(ctx: Context) -> Section:
    import dp_torch

    section = Section(
        "torch_stock", "dp_torch vs stock torch.nn.parallel",
        "t(dp_torch) / t(stock torch.nn.parallel), same module, batch "
        f"{ctx.batch_size} and replicas; stock runs through tests/torch_oracle.py on CPU. The target is "
        "for the whole forward+backward; the single steps say where a difference comes from",
    )
    n = len(ctx.torch_devices(ctx.n_devices))
    for width in ctx.strategy_widths:
        module, x = torch_model_and_batch(width, ctx.batch_size, ctx.torch_devices(1)[0])
        with stock_parallel(ctx, n) as (stock, stock_ids, devices):
            ours = step_thunks(dp_torch, module, x, devices, ctx.torch_sync)
            theirs = step_thunks(stock, module, x, stock_ids, ctx.torch_sync)
            for step in ours:
                labels = {"model": f"mlp{width}", "devices": n, "step": step}
                try:
                    ratio = measure_ratio(ours[step], theirs[step], ctx.settings)
                except Exception as error:
                    section.add_failure(labels, error)
                    continue
                section.add_ratio(labels, ratio, TARGET if step == "fwd+bwd" else None)
    if ctx.device == "cpu":
        section.notes.append("stock comm primitives on CPU are the oracle's Python stand-ins "
                             "(broadcast_coalesced = flatten+clone, gather = cat), not PyTorch's CUDA C++")
    return section
