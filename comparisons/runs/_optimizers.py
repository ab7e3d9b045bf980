"""The optimizers of a comparison, side by side: torch.optim's and optax's, with the same hyper-parameters.

Each maker imports its framework when called, so this module imports neither.
"""
from __future__ import annotations

from typing import Any

# Hyper-parameters of each optimizer, identical on both sides (torch defaults otherwise:
# SGD dampening 0, no nesterov; Adam betas (0.9, 0.999), eps 1e-8 added after the sqrt,
# which are optax's defaults too).
OPTIMIZERS: dict[str, dict[str, float]] = {
    "sgd": {"lr": 0.05},
    "momentum": {"lr": 0.05, "momentum": 0.9},
    "adam": {"lr": 0.01},
}


def torch_optimizer(name: str, params: Any) -> Any:
    """torch.optim's SGD / SGD with momentum / Adam over `params`, with the hyper-parameters in OPTIMIZERS."""
    import torch

    settings = OPTIMIZERS[name]
    if name == "adam":
        return torch.optim.Adam(params, lr=settings["lr"])
    return torch.optim.SGD(params, lr=settings["lr"], momentum=settings.get("momentum", 0.0))


def optax_optimizer(name: str, frozen: tuple[str, ...] = ()) -> Any:
    """optax's sgd / sgd with momentum / adam with the hyper-parameters in OPTIMIZERS; the parameters at the
    dotted paths `frozen` ('embed.embedding') get no update, as torch.optim gives a requires_grad=False one."""
    import optax

    settings = OPTIMIZERS[name]
    tx = optax.adam(settings["lr"]) if name == "adam" else optax.sgd(settings["lr"], momentum=settings.get("momentum"))
    if not frozen:
        return tx
    return optax.multi_transform({"train": tx, "frozen": optax.set_to_zero()},
                                 lambda params: _labels(params, frozen))


def _labels(params: Any, frozen: tuple[str, ...]) -> Any:
    import jax

    def label(path, _):
        dotted = ".".join(str(getattr(key, "key", getattr(key, "idx", key))) for key in path)
        return "frozen" if dotted in frozen else "train"
    return jax.tree_util.tree_map_with_path(label, params)
