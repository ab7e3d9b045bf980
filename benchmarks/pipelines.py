"""The four pipeline steps of each backend as separate thunks, on precomputed inputs.

Shared by the breakdown (where the time goes) and the replication sweep (re-replicating every
step against resident replicas). Every thunk blocks until its work is done.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

Thunk = Callable[[], Any]


def torch_steps(module: Any, x: Any, devices: list, sync: Callable[[], None]) -> dict[str, Thunk]:
    """dp_torch scatter / replicate / parallel_apply / gather, each on the previous step's result."""
    import dp_torch

    inputs = dp_torch.scatter((x,), devices)
    used = devices[: len(inputs)]
    replicas = dp_torch.replicate(module, used)
    outputs = dp_torch.parallel_apply(replicas, inputs, None, used)
    return {
        "scatter": lambda: (dp_torch.scatter((x,), devices), sync()),
        "replicate": lambda: (dp_torch.replicate(module, used), sync()),
        "parallel_apply": lambda: (dp_torch.parallel_apply(replicas, inputs, None, used), sync()),
        "gather": lambda: (dp_torch.gather(outputs, devices[0]), sync()),
    }


def torch_forward(module: Any, x: Any, devices: list, sync: Callable[[], None], *, resident: bool) -> Thunk:
    """A no_grad forward: replicate every call (torch's way) or reuse replicas made once."""
    import torch

    import dp_torch

    dp = dp_torch.DataParallel(module, devices)
    replicas = dp_torch.replicate(module, devices, detach=True)

    def forward() -> None:
        with torch.no_grad():
            if resident:
                inputs = dp_torch.scatter((x,), devices)
                outputs = dp_torch.parallel_apply(replicas[: len(inputs)], inputs, None, devices[: len(inputs)])
                dp_torch.gather(outputs, devices[0])
            else:
                dp(x)
        sync()

    return forward


def jax_steps(model: Any, variables: Any, x: Any, devices: list) -> dict[str, Thunk]:
    """dp_jax scatter / replicate / parallel_apply / gather (the 'explicit' strategy, step by step)."""
    import jax

    import dp_jax

    chunks = dp_jax.scatter(x, devices)
    used = devices[: len(chunks)]
    replicas = dp_jax.replicate(variables, used)
    outputs = dp_jax.parallel_apply(model.apply, replicas, chunks, devices=used)
    block = jax.block_until_ready
    return {
        "scatter": lambda: block(dp_jax.scatter(x, devices)),
        "replicate": lambda: block(dp_jax.replicate(variables, used)),
        "parallel_apply": lambda: block(dp_jax.parallel_apply(model.apply, replicas, chunks, devices=used)),
        "gather": lambda: block(dp_jax.gather(outputs, devices[0])),
    }


def jax_forward(model: Any, variables: Any, x: Any, devices: list, strategy: str, *, resident: bool) -> Thunk:
    """dp_jax forward: `data_parallel` places the variables every call; `DataParallel` caches them."""
    import jax

    import dp_jax

    if resident:
        dp = dp_jax.DataParallel(model, device_ids=devices, strategy=strategy)
        return lambda: jax.block_until_ready(dp.apply(variables, x))
    return lambda: jax.block_until_ready(
        dp_jax.data_parallel(model.apply, variables, x, device_ids=devices, strategy=strategy))
