"""Section: the training step, fwd+bwd+update, as users train (issue 11).

- dp_jax's compiled step (`DataParallel.train_step`, one jitted program: params and optimizer
  state resident and donated, batch in torch's chunks) against a hand-written plain-JAX step:
  `jax.jit` with NamedSharding (params `P()`, batch `P('data')`), the same chunks, the same
  optax update and donation. Targets: <= 1.10x for mlp512, <= 1.25x for mlp64.
- the same compiled step against single-device `jax.jit` of the step (reported, no target).
- compiles: programs the compiled step compiles on its first call (one per shapes and devices)
  and on a repeated call (none), counted from JAX's backend-compile events.
- dp_torch's training step (`DataParallel` forward, loss on the gathered output, backward,
  `optimizer.step()`) against stock `torch.nn.DataParallel` (the CPU oracle on CPU): <= 1.0x.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks.context import Context
from benchmarks.models import CLASSES, flax_model_and_batch, torch_model_and_batch
from benchmarks.results import Section
from benchmarks.timing import measure_ratio

JAX_TARGETS = {64: 1.25, 512: 1.10}
TORCH_TARGET = 1.0
STRATEGY = "shard_map"  # the compiled step's strategy in the sweep; the others are in the equivalence tests
LR = 0.01


def targets_for(width: int) -> float:
    return JAX_TARGETS.get(width, max(JAX_TARGETS.values()))


def _targets(batch_size: int, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((batch_size, CLASSES), dtype=np.float32)


class Stepper:
    """A thunk that runs one training step and keeps the state it returns (donated into the next)."""

    def __init__(self, step: Callable[..., tuple], state: list, batch: tuple):
        self.step, self.state, self.batch = step, state, batch

    def __call__(self) -> None:
        import jax

        *self.state, loss = self.step(*self.state, *self.batch)
        jax.block_until_ready(loss)


def dp_jax_step(model: Any, variables: Any, x: Any, y: Any, devices: list, tx: Any) -> Any:
    """dp_jax's compiled train step and its thunk (the caller's arrays as the first call's input)."""
    import jax.numpy as jnp

    import dp_jax

    dp = dp_jax.DataParallel(model, device_ids=devices, strategy=STRATEGY)
    step = dp.train_step(tx, lambda v, x, y: jnp.mean((dp.apply(v, x) - y) ** 2))
    return step, Stepper(step, [variables["params"], tx.init(variables["params"]), {}], (x, y))


def plain_jax_step(model: Any, variables: Any, x: Any, y: Any, devices: list, tx: Any) -> Stepper:
    """The hand-written reference: jit + NamedSharding, params P() resident and donated, batch P('data'):
    comparisons.bench's floor, the one implementation `run --bench` times too."""
    import jax
    import jax.numpy as jnp

    from comparisons.bench import sharded_train_step

    def loss(params, collections, x, y):  # the floor's signature: (loss, (output, updated collections))
        return jnp.mean((model.apply({"params": params}, x) - y) ** 2), (None, {})

    step = sharded_train_step(jax.value_and_grad(loss, has_aux=True), tx, devices)
    params = step.place(variables["params"])
    return Stepper(step, [params, step.place(tx.init(params)), {}], (x, y))


def single_device_step(model: Any, variables: Any, x: Any, y: Any, device: Any, tx: Any) -> Stepper:
    """`jax.jit` of the same step on one device (the floor's code on a mesh of one)."""
    return plain_jax_step(model, variables, x, y, [device], tx)


class CompileCounter:
    """Counts XLA backend compiles while active (JAX's '/jax/core/compile/backend_compile_duration' event)."""

    EVENT = "/jax/core/compile/backend_compile_duration"

    def __init__(self) -> None:
        import jax

        self.count, self.active = 0, False
        jax.monitoring.register_event_duration_secs_listener(self._listen)

    def _listen(self, event: str, duration: float, **_: Any) -> None:
        if self.active and event == self.EVENT:
            self.count += 1

    def during(self, thunk: Callable[[], Any]) -> int:
        self.count, self.active = 0, True
        try:
            thunk()
        finally:
            self.active = False
        return self.count


_COUNTER: CompileCounter | None = None


def compile_counter() -> CompileCounter:
    """One listener per process (JAX keeps every registered listener)."""
    global _COUNTER
    if _COUNTER is None:
        _COUNTER = CompileCounter()
    return _COUNTER


def dp_jax_missing() -> str | None:
    try:
        from dp_jax import DataParallel
    except ImportError as error:
        return f"does not exist yet: dp_jax is not importable ({error})"
    if not hasattr(DataParallel, "train_step"):
        return "does not exist yet: dp_jax.DataParallel.train_step"
    return None


def measure_jax(section: Section, ctx: Context) -> None:
    import optax

    tx = optax.sgd(LR, momentum=0.9)
    devices = ctx.jax_devices()
    counts = [n for n in ctx.device_counts if 2 <= n <= len(devices)] or [len(devices)]
    counter = compile_counter()
    for width in ctx.strategy_widths:
        model, variables, x = flax_model_and_batch(width, ctx.batch_size, devices[0])
        x, y = np.asarray(x), _targets(ctx.batch_size)
        single = single_device_step(model, variables, x, y, devices[0], tx)
        for n in counts:
            labels = {"model": f"mlp{width}", "devices": n}
            try:
                step, ours = dp_jax_step(model, variables, x, y, devices[:n], tx)
                first, repeated = counter.during(ours), counter.during(ours)
                reference = plain_jax_step(model, variables, x, y, devices[:n], tx)
                section.add_ratio({**labels, "vs": "plain JAX (jit + NamedSharding)"},
                                  measure_ratio(ours, reference, ctx.settings), targets_for(width))
                section.add_ratio({**labels, "vs": "single-device jax.jit"}, measure_ratio(ours, single, ctx.settings))
            except Exception as error:
                section.add_failure(labels, error)
                continue
            # no "target" key: the targets table at the top renders ratio rows only; the expectation is a label
            section.rows.append({"labels": {**labels, "vs": "compiles, first step", "expected": 1},
                                 "value": first, "unit": "programs"})
            section.rows.append({"labels": {**labels, "vs": "compiles, repeated step", "expected": 0},
                                 "value": repeated, "unit": "programs"})


def torch_step(dp: Any, module: Any, x: Any, y: Any, devices: list, sync: Callable[[], None]) -> Callable[[], None]:
    """PyTorch's DataParallel loop: loss on the gathered output, backward, optimizer.step()."""
    import torch

    wrapper = dp.DataParallel(module, devices)
    optimizer = torch.optim.SGD(module.parameters(), lr=LR, momentum=0.9)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(wrapper(x), y).backward()
        optimizer.step()
        sync()
    return step


def measure_torch(section: Section, ctx: Context) -> None:
    import copy

    import torch

    import dp_torch
    from benchmarks.torch_stock import stock_parallel

    n = len(ctx.torch_devices(ctx.n_devices))
    for width in ctx.strategy_widths:
        module, x = torch_model_and_batch(width, ctx.batch_size, ctx.torch_devices(1)[0])
        y = torch.from_numpy(_targets(ctx.batch_size)).to(x.device)
        labels = {"model": f"mlp{width}", "devices": n, "vs": "stock torch.nn.DataParallel"}
        with stock_parallel(ctx, n) as (stock, stock_ids, devices):
            try:
                ours = torch_step(dp_torch, module, x, y, devices, ctx.torch_sync)
                theirs = torch_step(stock, copy.deepcopy(module), x, y, stock_ids, ctx.torch_sync)
                section.add_ratio(labels, measure_ratio(ours, theirs, ctx.settings), TORCH_TARGET)
            except Exception as error:
                section.add_failure(labels, error)


def run(ctx: Context) -> Section:
    section = Section(
        "train_step", "Training step: compiled dp_jax step and dp_torch's loop",
        "t(A) / t(B) for one fwd+bwd+update step (SGD with momentum, mean-squared loss on the gathered "
        f"output), global batch {ctx.batch_size}; dp_jax's compiled step uses strategy {STRATEGY!r}. "
        "Compiles are counted from JAX's backend-compile events",
    )
    missing = dp_jax_missing()
    if missing:
        section.unavailable = missing
    else:
        measure_jax(section, ctx)
    measure_torch(section, ctx)
    if ctx.device == "cpu":
        section.notes.append("stock torch runs through tests/torch_oracle.py on CPU (Python stand-ins for its "
                             "CUDA comm primitives), as in the dp_torch vs stock section")
    return section
