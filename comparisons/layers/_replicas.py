"""Replica by replica: each replica's layers against the single-device run on its chunk, in both backends.

The same recorders as the layer view: torch's hooks see every replica `dp_torch.replicate` made (told apart
by module identity) while `dp_torch.parallel_apply` runs them in threads; JAX's interceptor sees each
replica's call on its own device (one jitted program per device, as the explicit strategy runs), on the
chunk `dp_jax.scatter` gave it, with the variables `dp_jax.replicate` committed there. A replica whose
layers compute differently from one device on the same chunk (it reads another replica's tensor or a stale
copy, keeps state across calls, depends on its device) is named with its device and its first differing
layer.
"""
from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np

from comparisons.judge import Bounds, compare_trees
from comparisons.layers._align import pair_calls
from comparisons.layers._capture import compiled_recorder, torch_hooks
from comparisons.layers._forward import build
from comparisons.layers._records import Call
from comparisons.placement import canonical_path
from comparisons.runs import RunInputs


def replica_divergences(run: RunInputs, torch_devices: Sequence[Any], jax_devices: Sequence[Any], *,
                        bounds: Bounds) -> list[dict[str, Any]]:
    """One record per replica (torch's, then JAX's) whose layers differ from one device on its chunk, under
    `bounds` (the comparison's rtol and atol; the cause is always "data_parallel").

    Costs one forward per chunk per backend on the replicas and as many on one device, eagerly (JAX op by
    op), in the run's dtype; the pair is built once more per backend.
    """
    tol = Bounds(bounds.rtol, bounds.atol)
    return _torch_replicas(run, list(torch_devices), tol) + _jax_replicas(run, list(jax_devices), tol)


def _torch_replicas(run: RunInputs, devices: list, tol) -> list[dict[str, Any]]:
    import torch

    import dp_torch

    mapping, dim = run.pair.mapping, run.config.dim
    module, _, _ = build(run, run.config.dtype)
    pristine = copy.deepcopy(module)  # the single-device runs start from the weights and buffers replicas do
    module = module.to(devices[0]).train()
    x = tuple(torch.from_numpy(np.ascontiguousarray(a)).to(devices[0]) for a in run.inputs)
    chunks = dp_torch.scatter(x, devices, dim)
    used = devices[:len(chunks)]
    with torch.no_grad():
        replicas = dp_torch.replicate(module, used)
        owner = {id(part): i for i, replica in enumerate(replicas) for part in replica.modules()}
        with torch_hooks(module, mapping, lambda part: owner.get(id(part))) as calls:
            dp_torch.parallel_apply(replicas, chunks, devices=used)
        singles = []
        for chunk in chunks:
            alone = copy.deepcopy(pristine).train()
            with torch_hooks(alone, mapping) as single_calls:
                alone(*(t.to("cpu") for t in chunk))
            singles.append(list(single_calls))
    return _named("torch", mapping, list(calls), singles, used, tol)


def _jax_replicas(run: RunInputs, devices: list, tol) -> list[dict[str, Any]]:
    import jax

    import dp_jax

    pair = run.pair
    _, flax_module, variables = build(run, run.config.dtype)
    mutable = ["batch_stats"] if pair.has_batch_stats else False
    chunks = dp_jax.scatter(tuple(pair.to_flax_inputs(run.inputs)), devices, run.config.dim)
    replicas = dp_jax.replicate(variables, devices[:len(chunks)])
    calls, singles = [], []
    home = jax.device_put(variables, devices[0])
    calls_of = compiled_recorder(flax_module, pair.mapping, mutable)
    with jax.default_matmul_precision("highest"):
        for i, (replica, chunk) in enumerate(zip(replicas, chunks)):
            calls += calls_of(replica, chunk, i)
            singles.append(calls_of(home, jax.device_put(chunk, devices[0]), None))
    return _named("jax", pair.mapping, calls, singles, devices[:len(chunks)], tol)


def _named(backend: str, mapping, calls: list[Call], singles: list[list[Call]], devices: list, tol) -> list[dict]:
    found = []
    for i, single in enumerate(singles):
        mine = [call for call in calls if call.replica == i]
        record = _first_difference(backend, mapping, pair_calls(mine, single), i, devices[i], tol)
        if record is not None:
            found.append(record)
    return found


def _first_difference(backend: str, mapping, pairs, replica: int, device: Any, tol) -> dict[str, Any] | None:
    for layer_index, k, mine, single in pairs:
        layer = mapping[layer_index]
        for side in ("input", "output"):
            path = f"{layer.torch}.{side}"
            a, b = (None if call is None else getattr(call, side) for call in (mine, single))
            if a is None and b is None:
                continue
            check = None if a is None or b is None else compare_trees(
                path, "replica vs single", {path: a}, {path: b}, tol._replace(cause="data_parallel"),
                sides=(f"{backend} replica {replica}", f"{backend} single"))
            if check is None or not check.passed:
                message = (f"`{path}`: a value on one side only" if check is None else check.leaves[0].message)
                return {"backend": backend, "replica": replica, "device": str(device), "torch": layer.torch,
                        "flax": canonical_path(layer.flax), "call": k, "side": side,
                        "max_abs": None if check is None else check.max_abs,
                        "message": f"{backend} replica {replica} on {device} computes `{layer.torch}` differently "
                                   f"from one device on its chunk: {message}"}
    return None
