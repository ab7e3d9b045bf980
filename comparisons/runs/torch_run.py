"""The torch side of a comparison: dp_torch's pipeline vs a single-device reference, K training steps.

The reference applies the same module to the same torch chunks one after another on one device,
keeping only chunk 0's buffer updates, which is what DataParallel computes (per-chunk BatchNorm
in training mode, replica 0's running statistics); numbers are then comparable to the tolerance.
"""
from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils import _pytree

import dp_torch
from comparisons.placement import PlacementMap, placement_of
from comparisons.runs import _checks as check
from comparisons.runs._optimizers import torch_optimizer
from comparisons.runs._records import BackendRun, RunInputs, Snapshot, Trajectory
from comparisons.runs._trees import output_tree, to_numpy


def run_torch(run: RunInputs, module: torch.nn.Module, devices: Sequence[torch.device],
              reference_device: torch.device, *, progress: Callable[[], None]) -> BackendRun:
    """Train a copy of `module` data-parallel on `devices` and another on `reference_device`."""
    config = run.config
    captured: list[PlacementMap] = []

    def dp_forward(m, x, first):
        return _dp_forward(m, x, list(devices), config.dim, captured if first else None)

    def single_forward(m, x, first):
        return _chunked_forward(m, x, len(devices), config.dim)

    dp = _train(run, module, devices, dp_forward, progress, captured, record=config.trajectory)
    single = _train(run, module, [reference_device], single_forward, progress)
    placement = sum(captured[1:], captured[0])
    chunks = [r.shape[config.dim] for r in placement.filter(role="input") if r.path == "args.0"]
    count = sum(p.numel() for p in module.parameters())
    return BackendRun("torch", dp, single, placement, chunks, count)


def run_torch_reference(run: RunInputs, module: torch.nn.Module, chunks: int, device: torch.device) -> Snapshot:
    """The single-device run alone: `chunks` chunks one after another on `device` (the float64 check's torch
    side; `run_torch` runs the same beside DataParallel)."""
    return _train(run, module, [device], lambda m, x, first: _chunked_forward(m, x, chunks, run.config.dim),
                  lambda: None, record=run.config.trajectory)


@contextlib.contextmanager
def torch_default_dtype(dtype: str) -> Iterator[None]:
    """torch's default dtype set to `dtype` for a float64 run, and restored after (costs nothing).

    Models build tensors without naming a dtype; transformers' causal masks are
    `torch.full(shape, torch.finfo(dtype).min)` cast afterwards, which overflows float32, the default,
    when `dtype` is float64 (XGLM). A float64 run computes as a float64 program would."""
    if dtype != "float64":
        yield
        return
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def _train(run: RunInputs, module, devices, forward, progress, captured=None, *, record: bool = False) -> Snapshot:
    with torch_default_dtype(run.config.dtype):
        return _train_steps(run, module, devices, forward, progress, captured, record=record)


def _train_steps(run: RunInputs, module, devices, forward, progress, captured, *, record: bool) -> Snapshot:
    pair, config = run.pair, run.config
    model = copy.deepcopy(module).to(devices[0]).train()
    optimizer = torch_optimizer(config.optimizer, model.parameters())
    x = tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in run.inputs)
    y = torch.from_numpy(np.ascontiguousarray(run.targets)).to(devices[0])
    first: dict[str, Any] = {}
    trajectory = Trajectory() if record else None
    for step in range(config.steps):
        optimizer.zero_grad()
        output = forward(model, x, step == 0)
        loss = check.scalar_loss(pair.name, "loss_torch", pair.loss_torch(output, y))
        loss.backward()
        if step == 0:
            first["output"] = output_tree(output)
            first["grads"], first["unused"] = _grads(model)
            first["state"] = {n: to_numpy(b) for n, b in model.state_dict().items()}
            if captured is not None:
                captured.append(placement_of(model, devices).filter(role="grad"))
        grads_now = _grads(model)[0] if trajectory is not None else None
        optimizer.step()
        if trajectory is not None:
            trajectory.add(loss.item(), pair.torch_grads_to_flax(grads_now), _flax_params(pair, model))
        progress()
    flax_state = pair.torch_to_flax(first["state"])
    final = pair.torch_to_flax({n: to_numpy(t) for n, t in model.state_dict().items()})
    grads = pair.torch_grads_to_flax(first["grads"])
    return Snapshot(first["output"], grads, flax_state.get("batch_stats", {}), final["params"], first["unused"],
                    trajectory)


def _flax_params(pair, model) -> Any:
    """The model's parameters now, as host arrays in the Flax layout (one conversion: a step of the trajectory)."""
    return pair.torch_to_flax({n: to_numpy(t) for n, t in model.state_dict().items()})["params"]


def _grads(model) -> tuple[dict, tuple[str, ...]]:
    """{name: grad} with zeros for parameters the loss did not reach, and their names.

    jax.grad gives such a parameter a zero gradient; torch leaves .grad None. The zeros make the
    two comparable; the names go to the `unused_parameters` check, which checks JAX's are zero.
    """
    grads, unused = {}, []
    for name, param in model.named_parameters():
        if param.grad is None:
            unused.append(name)
            grads[name] = np.zeros(tuple(param.shape), dtype=to_numpy(param).dtype)
        else:
            grads[name] = to_numpy(param.grad)
    return grads, tuple(unused)


def _dp_forward(module, inputs, devices, dim, captured):
    chunks = dp_torch.scatter(inputs, devices, dim)
    used = devices[: len(chunks)]
    replicas = dp_torch.replicate(module, used)
    outputs = dp_torch.parallel_apply(replicas, chunks, devices=used)
    output = dp_torch.gather(outputs, devices[0], dim)
    if captured is not None:
        captured += [placement_of(replicas, devices, original=module),
                     placement_of(chunks, devices, role="input", name="args", per_replica=True),
                     placement_of(output, devices, role="output", name="out")]
    return output


def _chunked_forward(module, inputs, n, dim):
    chunks = list(zip(*(x.to(_device_of(module)).chunk(n, dim) for x in inputs)))
    pristine = {name: b.clone() for name, b in module.named_buffers()}
    outputs = [module(*chunks[0])]  # chunk 0 updates the module's buffers, like replica 0
    params = dict(module.named_parameters())
    for chunk in chunks[1:]:
        state = params | {name: b.clone() for name, b in pristine.items()}
        outputs.append(torch.func.functional_call(module, state, chunk))
    return _concat(outputs, dim)


def _concat(outputs: list, dim: int):
    """The chunks' outputs joined as torch's gather joins them: tensors along `dim` (scalars stacked),
    dicts and sequences rebuilt by type, any other iterable (a transformers cache) as type(out)(items)."""
    out = outputs[0]
    if isinstance(out, torch.Tensor):
        return torch.stack(outputs) if out.dim() == 0 else torch.cat(outputs, dim)
    if out is None:
        return None
    if isinstance(out, dict):
        return type(out)((key, _concat([o[key] for o in outputs], dim)) for key in out)
    joined = [_concat(list(same), dim) for same in zip(*outputs)]
    return type(out)._make(joined) if _pytree.is_namedtuple_instance(out) else type(out)(joined)


def _device_of(module) -> torch.device:
    return next(module.parameters()).device
