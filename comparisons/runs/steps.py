"""One training step (forward, backward, update) of each side a comparison ran, as a thunk to time.

The bench (comparisons/bench/) times these once every check has passed: each thunk runs the step the
runs checked (the same modules, losses, optimizers and programs: dp_torch's four steps, DataParallel's
apply, the compiled `train_step`), keeps the state it returns for the next call, and blocks until the
step is done. Every side takes the host batch on each call, as a training loop would. Imports torch and
JAX: the harness imports this module only when a bench runs.
"""
from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
import torch

import dp_jax
from comparisons.runs import _checks as check
from comparisons.runs._jax_apply import chunked_apply, dp_apply, mutable_collections, value_and_grad
from comparisons.runs._jax_compiled import _StepKey, _train_step, has_compiled_step
from comparisons.runs._optimizers import optax_optimizer, torch_optimizer
from comparisons.runs._records import RunInputs
from comparisons.runs.jax_run import _optimizer_step
from comparisons.runs.torch_run import _dp_forward, torch_default_dtype

Thunk = Callable[[], Any]


def torch_steps(run: RunInputs, module: torch.nn.Module, devices: Sequence[torch.device], reference: torch.device,
                kind: str) -> dict[str, Thunk]:
    """{side: thunk} for torch on one device, dp_torch.DataParallel's pipeline and, on CUDA devices, stock
    torch.nn.DataParallel (elsewhere it cannot run: its comm primitives are CUDA's)."""
    dim, devices = run.config.dim, list(devices)
    steps = {"torch, one device": _torch_step(run, module, reference, lambda m, x: m(*(a.to(reference) for a in x))),
             "dp_torch.DataParallel": _torch_step(run, module, devices[0],
                                                  lambda m, x: _dp_forward(m, x, devices, dim, None))}
    if kind == "cuda":
        ids = [d.index for d in devices]
        stock: dict[int, torch.nn.DataParallel] = {}

        def stock_forward(m, x):
            wrapper = stock.setdefault(id(m), torch.nn.DataParallel(m, device_ids=ids, dim=dim))
            return wrapper(*x)
        steps["torch.nn.DataParallel"] = _torch_step(run, module, devices[0], stock_forward)
    return steps


def _torch_step(run: RunInputs, module: torch.nn.Module, device: torch.device,
                forward: Callable[[torch.nn.Module, tuple], Any]) -> Thunk:
    """zero_grad, forward, the pair's loss, backward, optimizer.step() on a copy of `module` on `device`."""
    pair = run.pair
    model = copy.deepcopy(module).to(device).train()
    optimizer = torch_optimizer(run.config.optimizer, model.parameters())
    x = tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in run.inputs)
    y = torch.from_numpy(np.ascontiguousarray(run.targets)).to(device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def step() -> None:
        with torch_default_dtype(run.config.dtype):
            optimizer.zero_grad()
            check.scalar_loss(pair.name, "loss_torch", pair.loss_torch(forward(model, x), y)).backward()
            optimizer.step()
        sync()
    return step


def single_grad(run: RunInputs, flax_module: Any) -> Callable:
    """(params, state, x, y) -> ((loss, (output, updated)), grads) of the whole batch in one apply: what the
    single-device jax.jit side and the hand-written floor differentiate."""
    pair = run.pair
    whole = chunked_apply(flax_module, (run.config.batch_size,), run.config.dim, mutable_collections(pair))
    return value_and_grad(pair.loss_jax, whole, pair.name)


def jax_steps(run: RunInputs, flax_module: Any, variables: dict, devices: Sequence[Any], strategy: str
              ) -> dict[str, Thunk]:
    """{side: thunk} for dp_jax strategy `strategy`: its eager apply with optax, and its compiled train_step
    when it has one (the mapped strategies)."""
    pair, config = run.pair, run.config
    variables = jax.device_put(variables, devices[0])
    x = pair.to_flax_inputs(run.inputs)
    mutable = mutable_collections(pair)
    wrapper = dp_jax.DataParallel(flax_module, list(devices), dim=config.dim, strategy=strategy)
    steps = {f"dp_jax {strategy}, eager apply + optax": _eager_step(
        value_and_grad(pair.loss_jax, dp_apply(wrapper, mutable), pair.name), variables, x, run)}
    if has_compiled_step(strategy):
        key = _StepKey(flax_module, tuple(devices), strategy, config.dim, mutable, pair.loss_jax, pair.name,
                       config.optimizer)
        try:
            compiled = _train_step(key)
        except TypeError:  # an unhashable module field: build afresh, as the runs do
            compiled = _train_step.__wrapped__(key)
        steps[f"dp_jax {strategy}, train_step"] = _compiled_step(compiled, variables, x, run)
    return steps


def _eager_step(grad_fn: Callable, variables: dict, x: tuple, run: RunInputs) -> Thunk:
    """The eager path's step: DataParallel.apply under jax.value_and_grad, then the jitted optax update."""
    init, update = _optimizer_step(run.config.optimizer)
    state = {"params": variables["params"], "collections": _collections(variables)}
    state["opt"] = init(state["params"])

    def step() -> None:
        (loss, (_, updated)), grads = grad_fn(state["params"], state["collections"], x, run.targets)
        state["collections"] = {**state["collections"], **updated}
        state["params"], state["opt"] = update(grads, state["opt"], state["params"])
        jax.block_until_ready((loss, state["params"]))
    return step


def _compiled_step(compiled: Callable, variables: dict, x: tuple, run: RunInputs) -> Thunk:
    """dp_jax's compiled train_step; params, optimizer state and collections donated into the next call."""
    params = jax.tree.map(lambda a: a.copy(), variables["params"])  # donated: never the caller's arrays
    state = [params, optax_optimizer(run.config.optimizer).init(params), _collections(variables)]

    def step() -> None:
        *state[:], loss, _ = compiled(*state, x, run.targets)  # (params, opt_state, collections, loss, grads)
        jax.block_until_ready(loss)
    return step


def _collections(variables: dict) -> dict:
    return {k: jax.tree.map(lambda a: a.copy(), v) for k, v in variables.items() if k != "params"}
