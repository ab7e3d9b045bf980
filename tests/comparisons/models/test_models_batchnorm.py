"""TorchBatchNorm keeps torch's running statistics; Flax momentum is 1 - torch momentum."""
import jax
import numpy as np
import pytest
import torch
from flax import linen as nn

from comparisons.convert import flax_momentum
from comparisons.models.flax_nets import TorchBatchNorm


def torch_batchnorm_step(x, momentum):
    layer = torch.nn.BatchNorm1d(x.shape[-1], momentum=momentum)
    out = layer(torch.from_numpy(x))
    return out.detach().numpy(), layer.running_mean.numpy(), layer.running_var.numpy()


@pytest.mark.parametrize("momentum, batch", [(0.1, 6), (0.35, 3)])
def test_flax_momentum_converts_torch_momentum_for_the_running_mean(momentum, batch):
    x = np.random.default_rng(batch).standard_normal((batch, 4)).astype(np.float32)
    _, torch_mean, torch_var = torch_batchnorm_step(x, momentum)
    layer = nn.BatchNorm(use_running_average=False, momentum=flax_momentum(momentum))
    variables = layer.init(jax.random.key(0), x)
    _, state = layer.apply(variables, x, mutable=["batch_stats"])
    np.testing.assert_allclose(state["batch_stats"]["mean"], torch_mean, atol=1e-6)
    # but Flax's own BatchNorm tracks the biased variance (ddof=0), torch the unbiased one
    biased = (1 - momentum) * 1.0 + momentum * x.var(axis=0)
    np.testing.assert_allclose(state["batch_stats"]["var"], biased, atol=1e-6)
    assert not np.allclose(state["batch_stats"]["var"], torch_var, atol=1e-4)


@pytest.mark.parametrize("momentum, batch", [(0.1, 6), (0.35, 3)])
def test_torch_batchnorm_module_matches_torch_output_and_running_stats(momentum, batch):
    x = np.random.default_rng(batch).standard_normal((batch, 4)).astype(np.float32)
    torch_out, torch_mean, torch_var = torch_batchnorm_step(x, momentum)
    layer = TorchBatchNorm(momentum=flax_momentum(momentum))
    out, state = layer.apply(layer.init(jax.random.key(0), x), x, train=True, mutable=["batch_stats"])
    np.testing.assert_allclose(out, torch_out, atol=1e-5)
    np.testing.assert_allclose(state["batch_stats"]["mean"], torch_mean, atol=1e-6)
    np.testing.assert_allclose(state["batch_stats"]["var"], torch_var, atol=1e-6)


def test_torch_batchnorm_with_axis_name_equals_full_batch_torch_batchnorm():
    shards = np.random.default_rng(1).standard_normal((4, 3, 5)).astype(np.float32)
    layer = TorchBatchNorm(axis_name="replicas")
    variables = layer.init(jax.random.key(0), shards[0])
    per_shard = jax.vmap(lambda s: layer.apply(variables, s, train=True, mutable=["batch_stats"]),
                         axis_name="replicas")
    out, state = per_shard(shards)
    torch_out, _, torch_var = torch_batchnorm_step(shards.reshape(12, 5), 0.1)
    np.testing.assert_allclose(np.asarray(out).reshape(12, 5), torch_out, atol=1e-5)
    np.testing.assert_allclose(state["batch_stats"]["var"][2], torch_var, atol=1e-6)
