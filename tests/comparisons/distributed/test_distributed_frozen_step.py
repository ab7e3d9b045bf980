"""The multi-process JAX step masks what torch freezes, as the single-process runs do: a `frozen_in_torch` pair
keeps its frozen parameter on every process (issue 36 review). Run here on this process's devices, one process
holding every row of the global mesh."""
from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from comparisons.distributed import multihost_step as step
from comparisons.models import pair_from_modules


class FlaxTwoLayers(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool = False):
        return nn.Dense(2, name="head")(jnp.tanh(nn.Dense(5, name="body")(x)))


def features(batch_size, seed, dtype):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((batch_size, 3)).astype(dtype),), rng.standard_normal((batch_size, 2)).astype(dtype)


def frozen_body_pair(seed: int):
    torch.manual_seed(seed)
    net = torch.nn.Sequential()
    net.add_module("body", torch.nn.Linear(3, 5))
    net.add_module("act", torch.nn.Tanh())
    net.add_module("head", torch.nn.Linear(5, 2))
    net.body.weight.requires_grad_(False)
    return pair_from_modules("frozen_body", net, FlaxTwoLayers(), make_inputs=features,
                             known_differences=("frozen_in_torch",), loss_torch=lambda o, y: ((o - y) ** 2).mean(),
                             loss_jax=lambda o, y: jnp.mean((o - y) ** 2))


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_the_multi_process_step_leaves_a_frozen_parameter_unchanged(optimizer):
    seed = int(np.random.default_rng().integers(1000))
    pair, (_, flax_module, variables) = frozen_body_pair(seed).build_declared(seed=seed)
    assert pair.frozen == ("body.kernel",)
    _, train_step, tx = step.compiled_steps(pair, flax_module, optimizer, 1)
    mesh = train_step.placement.mesh  # every device of this process
    inputs, targets = pair.make_inputs(2 * mesh.devices.size, seed, np.float32)
    params, state = step.replicated(mesh, variables)
    batch = [step.global_batch(mesh, a) for a in (*inputs, targets)]
    after = step.local(train_step(params, tx.init(params), state, *batch)[0])
    before = variables["params"]
    np.testing.assert_array_equal(after["body"]["kernel"], before["body"]["kernel"])
    for moved in (("body", "bias"), ("head", "kernel")):
        assert not np.array_equal(after[moved[0]][moved[1]], before[moved[0]][moved[1]]), moved
