"""The optax twin of `_torch_run.make_optimizer`: the same optimizers, the same hyper-parameters."""
from __future__ import annotations

import optax

from comparisons._runs import OPTIMIZERS


def make_optimizer(name: str) -> optax.GradientTransformation:
    """optax's sgd / sgd with momentum / adam with the hyper-parameters in OPTIMIZERS."""
    settings = OPTIMIZERS[name]
    if name == "adam":
        return optax.adam(settings["lr"])
    return optax.sgd(settings["lr"], momentum=settings.get("momentum"))
