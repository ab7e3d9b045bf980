"""Each NNX twin of a built-in pair computes what its linen twin computes, given the same weights.

Each twin gets torch's weights through its pair's mapping (the NNX LSTM's fuses the gates, linen's does not), the
NNX twin through `nnx.state` / `nnx.update`, matched by path (`load_linen`, test-only). Then both run the same drawn
inputs, in train and eval mode: outputs, BatchNorm statistics and gradients agree (linen's gradients read in the
NNX layout through torch's, by the two mappings' exact rules).
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from flax.traverse_util import flatten_dict
from hypothesis import given, settings
from hypothesis import strategies as st

from comparisons.convert import flax_grads_to_torch, flax_momentum, torch_grads_to_flax, torch_to_flax
from comparisons.models import builtin, nnx_nets
from comparisons.models.nnx_nets import TorchBatchNorm

PAIRS = {"mlp": (builtin.MLP, nnx_nets.MLP), "cnn_bn": (builtin.CNN_BN, nnx_nets.CNNBN),
         "transformer_block": (builtin.TRANSFORMER_BLOCK, nnx_nets.TransformerBlock),
         "embedding_lstm": (builtin.EMBEDDING_LSTM, nnx_nets.EmbeddingLSTM)}
FLOAT32 = dict(rtol=1e-6, atol=1e-7)  # an ulp of room: two programs, compiled apart
NNX_PAIRS = {pair.name: pair for pair in builtin.BUILTIN_NNX}


def by_nnx_path(variables: dict) -> dict[tuple, np.ndarray]:
    """Linen variables keyed by the NNX path that holds them: collections dropped, `if` spelled `if_` (NNX's
    LSTMCell cannot name an attribute `if`)."""
    return {tuple("if_" if part == "if" else part for part in path): np.asarray(value)
            for (_, *path), value in flatten_dict(variables).items()}


def nnx_arrays(state) -> dict[tuple, np.ndarray]:
    return {tuple(map(str, path)): np.asarray(variable.get_value()) for path, variable in nnx.to_flat_state(state)}


def load_linen(model: nnx.Module, variables: dict) -> None:
    """Write linen variables into the model's Params and BatchStats; every leaf on both sides is used."""
    state = nnx.state(model, nnx.Any(nnx.Param, nnx.BatchStat))
    linen, targets = by_nnx_path(variables), nnx_arrays(state)
    assert set(linen) == set(targets), (sorted(set(linen) ^ set(targets)))
    pure = nnx.to_pure_dict(state)
    for path, value in linen.items():
        assert value.shape == targets[path].shape, path
        leaf_parent = pure
        for part in path[:-1]:
            leaf_parent = leaf_parent[part]
        leaf_parent[path[-1]] = jnp.asarray(value)
    nnx.replace_by_pure_dict(state, pure)
    nnx.update(model, state)


def twins(name: str, seed: int):
    """(pair, linen model, linen variables, NNX model), torch's weights in both; BatchNorm statistics drawn."""
    pair, nnx_class = PAIRS[name]
    torch.manual_seed(seed)
    torch_model = pair.make_torch()
    for module in torch_model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.running_mean.normal_()
            module.running_var.uniform_(0.5, 2.0)
    linen = pair.make_flax()
    inputs, _ = pair.make_inputs(2, seed, np.float32)
    like = jax.eval_shape(linen.init, jax.random.key(0), *pair.to_flax_inputs(inputs))
    variables = torch_to_flax(torch_model.state_dict(), pair.mapping, like=like)
    model = nnx_class(rngs=nnx.Rngs(seed))
    load_linen(model, torch_to_flax(torch_model.state_dict(), NNX_PAIRS[name].mapping))
    return pair, linen, variables, model


def assert_trees_close(nnx_tree: dict, linen_tree: dict) -> None:
    assert set(nnx_tree) == set(linen_tree)
    for path, value in nnx_tree.items():
        np.testing.assert_allclose(value, linen_tree[path], **FLOAT32, err_msg=".".join(path))


@pytest.mark.parametrize("name", PAIRS)
@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
@given(seed=st.integers(0, 2**16), batch_size=st.integers(2, 4))
@settings(max_examples=2, deadline=None)
def test_nnx_twin_forward_matches_linen_twin(name, train, seed, batch_size):
    pair, linen, variables, model = twins(name, seed)
    inputs, _ = pair.make_inputs(batch_size, seed + 1, np.float32)
    flax_inputs = pair.to_flax_inputs(inputs)
    if train:
        linen_out, updates = jax.jit(linen.apply, static_argnames=("train", "mutable"))(
            variables, *flax_inputs, train=True, mutable="batch_stats")
        model.train()
    else:
        linen_out, updates = jax.jit(linen.apply, static_argnames="train")(variables, *flax_inputs, train=False), {}
        model.eval()
    out = nnx.jit(lambda m, *x: m(*x))(model, *flax_inputs)  # one compile: cheaper than op by op
    assert out.dtype == linen_out.dtype == jnp.float32
    np.testing.assert_allclose(out, linen_out, **FLOAT32)
    stats = nnx_arrays(nnx.state(model, nnx.BatchStat))
    expected = by_nnx_path({"batch_stats": updates.get("batch_stats", variables.get("batch_stats", {}))})
    assert_trees_close(stats, expected)
    if name == "cnn_bn":  # the statistics moved in train mode only
        assert train != all(np.array_equal(stats[k], by_nnx_path(variables)[k]) for k in stats)


@pytest.mark.parametrize("name", PAIRS)
@given(seed=st.integers(0, 2**16))
@settings(max_examples=1, deadline=None)
def test_nnx_twin_training_gradients_match_linen_twin(name, seed):
    pair, linen, variables, model = twins(name, seed)
    inputs, targets = pair.make_inputs(3, seed + 2, np.float32)
    flax_inputs = pair.to_flax_inputs(inputs)
    others = {k: v for k, v in variables.items() if k != "params"}

    def linen_loss(params):
        out = linen.apply({"params": params, **others}, *flax_inputs, train=True, mutable=["batch_stats"])[0]
        return pair.loss_jax(out, targets)

    linen_grads = jax.jit(jax.grad(linen_loss))(variables["params"])
    model.train()
    grads = nnx.jit(nnx.grad(lambda m: pair.loss_jax(m(*flax_inputs), targets)))(model)
    in_nnx_layout = torch_grads_to_flax(flax_grads_to_torch(linen_grads, pair.mapping), NNX_PAIRS[name].mapping)
    assert_trees_close(nnx_arrays(grads), by_nnx_path({"params": in_nnx_layout}))
    assert any(np.abs(g).max() > 0 for g in nnx_arrays(grads).values())


@pytest.mark.parametrize("momentum, batch", [(0.1, 6), (0.35, 3)])
def test_nnx_torch_batchnorm_matches_torch_output_and_running_stats(momentum, batch):
    x = np.random.default_rng(batch).standard_normal((batch, 4)).astype(np.float32)
    layer = torch.nn.BatchNorm1d(4, momentum=momentum)
    torch_out = layer(torch.from_numpy(x)).detach().numpy()
    nnx_layer = TorchBatchNorm(4, momentum=flax_momentum(momentum))
    np.testing.assert_allclose(nnx_layer(jnp.asarray(x)), torch_out, atol=1e-5)
    np.testing.assert_allclose(nnx_layer.mean[...], layer.running_mean.numpy(), atol=1e-6)
    np.testing.assert_allclose(nnx_layer.var[...], layer.running_var.numpy(), atol=1e-6)
    layer.eval()
    nnx_layer.eval()
    np.testing.assert_allclose(nnx_layer(jnp.asarray(x)), layer(torch.from_numpy(x)).detach().numpy(), atol=1e-5)


def test_nnx_torch_batchnorm_with_axis_name_equals_full_batch_torch_batchnorm():
    shards = np.random.default_rng(1).standard_normal((4, 3, 5)).astype(np.float32)
    layer = TorchBatchNorm(5, axis_name="replicas")

    @nnx.vmap(in_axes=(None, 0), out_axes=0, axis_name="replicas")
    def per_shard(layer, shard):
        return layer(shard)

    out = per_shard(layer, jnp.asarray(shards))
    torch_layer = torch.nn.BatchNorm1d(5)
    torch_out = torch_layer(torch.from_numpy(shards.reshape(12, 5))).detach().numpy()
    np.testing.assert_allclose(np.asarray(out).reshape(12, 5), torch_out, atol=1e-5)
    np.testing.assert_allclose(layer.var[...], torch_layer.running_var.numpy(), atol=1e-6)
