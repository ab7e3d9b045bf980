"""A model pair defined outside the comparisons package, as a user would write one (used by the CLI tests)."""
import dataclasses
import os
import time

import numpy as np

from comparisons.convert import Layer
from comparisons.models import ModelPair


def make_torch():
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(6, 3)

        def forward(self, x):
            return torch.tanh(self.fc(x))

    return Net()


def make_flax():
    import flax.linen as nn

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x, train=False):
            return nn.tanh(nn.Dense(3, name="fc")(x))

    return Net()


def make_inputs(batch_size, seed, dtype):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((batch_size, 6)).astype(dtype),), rng.standard_normal((batch_size, 3)).astype(dtype)


def loss_torch(output, target):
    import torch

    return torch.nn.functional.mse_loss(output, torch.as_tensor(target))


def loss_jax(output, target):
    import jax.numpy as jnp

    return jnp.mean(jnp.square(output - target))


TINY = ModelPair(name="tiny_tanh", make_torch=make_torch, make_flax=make_flax, mapping=(Layer("linear", "fc", "fc"),),
                 make_inputs=make_inputs, loss_torch=loss_torch, loss_jax=loss_jax, description="Linear(6, 3)-tanh")


def _slow_torch():
    """Signals that the comparison has started, then takes long enough to be interrupted."""
    with open(os.environ["TINY_PAIRS_MARKER"], "w") as marker:
        marker.write("building")
    time.sleep(120)
    return make_torch()


def _busy_torch():
    """Signals that the comparison has started, then runs JAX's garbage-collection callback over and over for
    long enough to be interrupted: a KeyboardInterrupt raised inside that callback is swallowed (most times)."""
    import gc

    import jax.numpy as jnp

    jnp.ones(1)
    with open(os.environ["TINY_PAIRS_MARKER"], "w") as marker:
        marker.write("building")
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        for _ in range(1000):
            gc.collect(0)
    return make_torch()


SLOW = dataclasses.replace(TINY, name="tiny_slow", make_torch=_slow_torch)
BUSY = dataclasses.replace(TINY, name="tiny_busy", make_torch=_busy_torch)
