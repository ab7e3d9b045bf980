"""Flax NNX through dp_jax: the linen semantics (torch's chunks, BatchNorm from chunk 0, dropout per replica,
gradients and training equal to one device) for an nnx.Module, over every strategy; and the refusals.

The NNX model is checked against references computed apart from dp_jax: the same model on one device,
chunk by chunk, and a linen twin holding the same weights run by linen's path."""
import ast
import inspect
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

import dp_jax
import dp_jax.nnx as dp_nnx
from dp_jax import STRATEGIES, DataParallel, UsageError

MAPPED = [s for s in STRATEGIES if s != "explicit"]
DEVICE_COUNTS = [1, 2, 3, 4]


class Net(nnx.Module):
    """Linear -> BatchNorm -> Dropout -> Linear: every kind of state DataParallel treats apart."""

    def __init__(self, seed: int, axis_name: str | None = None, dropout: float = 0.0):
        rngs = nnx.Rngs(seed)
        self.hidden = nnx.Linear(3, 5, rngs=rngs)
        self.norm = nnx.BatchNorm(5, axis_name=axis_name, rngs=rngs)
        self.drop = nnx.Dropout(dropout, rngs=rngs)
        self.out = nnx.Linear(5, 2, rngs=rngs)

    def __call__(self, x):
        return self.out(self.drop(self.norm(self.hidden(x))))


class LinenNet(nn.Module):
    """Net's linen twin (the same weights through linen's path of DataParallel)."""

    @nn.compact
    def __call__(self, x, train):
        x = nn.BatchNorm(use_running_average=not train)(nn.Dense(5)(x))
        return nn.Dense(2)(x)


def linen_variables(model: Net) -> dict:
    def dense(layer):
        return {"kernel": layer.kernel[...], "bias": layer.bias[...]}
    return {"params": {"Dense_0": dense(model.hidden), "Dense_1": dense(model.out),
                       "BatchNorm_0": {"scale": model.norm.scale[...], "bias": model.norm.bias[...]}},
            "batch_stats": {"BatchNorm_0": {"mean": model.norm.mean[...], "var": model.norm.var[...]}}}


def batch_of(seed: int, rows: int) -> np.ndarray:
    return np.random.RandomState(seed).randn(rows, 3).astype(np.float32)


def devices(n: int) -> list:
    return jax.devices()[:n]


def state_leaves(model) -> list:
    return jax.tree.leaves(nnx.state(model, graph=True))


# --- forward: torch's chunks, BatchNorm from chunk 0, eval changes nothing ----------------------


@pytest.mark.parametrize("strategy", STRATEGIES)
@settings(max_examples=4, deadline=None)
@given(batch=st.integers(1, 11), n=st.sampled_from(DEVICE_COUNTS), seed=st.integers(0, 2**16), train=st.booleans())
def test_nnx_equals_its_linen_twin_and_takes_torch_chunks(strategy, batch, n, seed, train):
    model = Net(seed)
    model.train() if train else model.eval()
    twin = linen_variables(model)
    x = batch_of(seed, batch)
    dp = DataParallel(model, devices(n), strategy=strategy)
    out = dp(x)
    want, stats = DataParallel(LinenNet(), devices(n), strategy=strategy).apply(twin, x, train,
                                                                                mutable=["batch_stats"])
    np.testing.assert_allclose(np.asarray(out), np.asarray(want), rtol=1e-5, atol=1e-6)
    assert dp.last_plan.chunk_sizes == tuple(dp_jax.chunk_sizes(batch, n))
    linen_mean = stats["batch_stats"]["BatchNorm_0"]["mean"]
    np.testing.assert_allclose(np.asarray(model.norm.mean[...]), np.asarray(linen_mean), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("strategy", MAPPED)
@settings(max_examples=3, deadline=None)
@given(batch=st.integers(1, 11), n=st.sampled_from(DEVICE_COUNTS), seed=st.integers(0, 2**16))
def test_mapped_strategies_equal_explicit_exactly_on_uneven_batches(strategy, batch, n, seed):
    results = {}
    for name in ("explicit", strategy):
        model = Net(seed, dropout=0.5)
        model.train()
        results[name] = (np.asarray(DataParallel(model, devices(n), strategy=name)(batch_of(seed, batch))),
                         np.asarray(model.norm.var[...]))
    check = np.testing.assert_array_equal if strategy != "sharded" else (  # vmap's batched matmul may round apart
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7))
    for got, want in zip(results[strategy], results["explicit"]):
        check(got, want)


@pytest.mark.parametrize("strategy", STRATEGIES)
@settings(max_examples=3, deadline=None)
@given(batch=st.integers(2, 11), seed=st.integers(0, 2**16))
def test_train_mode_batch_stats_are_chunk_zeros(strategy, batch, seed):
    model, alone = Net(seed), Net(seed)
    model.train(), alone.train()
    x = batch_of(seed, batch)
    DataParallel(model, devices(4), strategy=strategy)(x)
    alone(x[: dp_jax.chunk_sizes(batch, 4)[0]])  # one device, torch's chunk 0 only
    for got, want in zip(state_leaves(model.norm), state_leaves(alone.norm)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-7)
    assert not np.allclose(np.asarray(model.norm.mean[...]), 0.0)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_eval_mode_changes_nothing_in_the_model(strategy):
    model = Net(3)
    model.eval()
    before = state_leaves(model)
    dp = DataParallel(model, devices(4), strategy=strategy)
    dp(batch_of(3, 7))
    assert all(a is b for a, b in zip(state_leaves(model), before))
    model.train()  # the same module and wrapper, switched: now replica 0's statistics come back
    dp(batch_of(3, 7))
    assert not np.allclose(np.asarray(model.norm.mean[...]), 0.0)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_sync_collections_is_the_mean_of_the_chunks_stats(strategy):
    model = Net(5)
    model.train()
    x = batch_of(5, 8)
    DataParallel(model, devices(4), strategy=strategy, sync_collections=True)(x)
    per_chunk = []
    for chunk in np.split(x, 4):
        alone = Net(5)
        alone.train()
        alone(chunk)
        per_chunk.append(np.asarray(alone.norm.var[...]))
    np.testing.assert_allclose(np.asarray(model.norm.var[...]), np.mean(per_chunk, axis=0), rtol=1e-5)


@pytest.mark.parametrize("strategy", MAPPED)
def test_axis_name_gives_full_batch_batchnorm(strategy):
    model, alone = Net(6, axis_name="batch"), Net(6)
    model.train(), alone.train()
    x = batch_of(6, 8)
    out = DataParallel(model, devices(4), strategy=strategy, axis_name="batch")(x)
    want = alone(x)
    np.testing.assert_allclose(np.asarray(out), np.asarray(want), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(model.norm.var[...]), np.asarray(alone.norm.var[...]), rtol=1e-5)


# --- dropout: replica i draws from fold_in(key, i); the model's RNG advances once per call ------------


@pytest.mark.parametrize("strategy", STRATEGIES)
@settings(max_examples=3, deadline=None)
@given(batch=st.integers(1, 9), seed=st.integers(0, 2**16))
def test_dropout_stream_per_replica(strategy, batch, seed):
    model = nnx.Dropout(0.5, rngs=nnx.Rngs(seed))
    x = np.ones((batch, 6), np.float32)
    key = model.rngs.key[...]
    out = np.asarray(DataParallel(model, devices(3), strategy=strategy)(x))
    start = 0
    for i, rows in enumerate(dp_jax.chunk_sizes(batch, 3)):
        alone = nnx.Dropout(0.5, rngs=nnx.Rngs(0))
        alone.rngs.key[...] = jax.random.fold_in(key, i)
        np.testing.assert_array_equal(out[start:start + rows], np.asarray(alone(x[start:start + rows])))
        start += rows
    assert int(model.rngs.count[...]) == 1  # as one single-device call leaves it
    second = np.asarray(DataParallel(model, devices(3), strategy=strategy)(x))
    assert not np.array_equal(second, out)


# --- gradients and jit ----------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", STRATEGIES)
@settings(max_examples=3, deadline=None)
@given(batch=st.integers(1, 11), n=st.sampled_from(DEVICE_COUNTS), seed=st.integers(0, 2**16))
def test_nnx_grad_equals_single_device(strategy, batch, n, seed):
    model = Net(seed)
    model.eval()
    x, y = batch_of(seed, batch), batch_of(seed + 1, batch)[:, :2]

    def loss(m, x, y):
        return jnp.mean((DataParallel(m, devices(n), strategy=strategy)(x) - y) ** 2)

    grads = nnx.grad(loss)(model, x, y)
    want = nnx.grad(lambda m, x, y: jnp.mean((m(x) - y) ** 2))(model, x, y)
    params = jax.tree.leaves(nnx.state(model, nnx.Param))
    for got, expected, param in zip(jax.tree.leaves(grads), jax.tree.leaves(want), params, strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-4, atol=1e-6)
        assert got.devices() == param.devices()  # the gradient lands where its parameter lives


@pytest.mark.parametrize("strategy", MAPPED)
def test_inside_jax_jit_equals_eager(strategy):
    model = Net(8)
    model.train()
    graphdef, state = nnx.split(model, graph=True)

    @jax.jit
    def run(state, x):
        traced = nnx.merge(graphdef, state)
        out = DataParallel(traced, devices(4), strategy=strategy)(x)
        return out, nnx.state(traced, graph=True)

    x = batch_of(8, 7)
    out, new_state = run(state, x)
    eager = DataParallel(model, devices(4), strategy=strategy)(x)
    np.testing.assert_allclose(np.asarray(out), np.asarray(eager), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(new_state["norm"]["mean"][...]), np.asarray(model.norm.mean[...]),
                               rtol=1e-6)


# --- train_step: K steps equal one device's nnx.Optimizer loop -----------------------------------


@pytest.mark.parametrize("strategy", MAPPED)
@settings(max_examples=2, deadline=None)
@given(batch=st.integers(1, 11), seed=st.integers(0, 2**16))
def test_train_step_equals_one_device_optimizer(strategy, batch, seed):
    model, reference = Net(seed), Net(seed)
    model.eval(), reference.eval()  # BatchNorm from running stats: one device and DP agree on every batch
    tx = optax.adam(1e-2)
    step = DataParallel(model, devices(4), strategy=strategy).train_step(
        tx, lambda dp, x, y: jnp.mean((dp(x) - y) ** 2))
    optimizer = nnx.Optimizer(reference, tx, wrt=nnx.Param)
    x, y = batch_of(seed, batch), batch_of(seed + 1, batch)[:, :2]
    for _ in range(3):
        loss = step(x, y)
        want_loss, grads = nnx.value_and_grad(lambda m: jnp.mean((m(x) - y) ** 2))(reference)
        optimizer.update(reference, grads)
        np.testing.assert_allclose(float(loss), float(want_loss), rtol=1e-5)
    for got, want in zip(jax.tree.leaves(nnx.state(model, nnx.Param)), jax.tree.leaves(nnx.state(reference,
                                                                                                    nnx.Param))):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-6)
    assert step.compiles() == 1


def test_train_step_writes_batch_stats_and_rng_counts_back():
    model = Net(2, dropout=0.3)
    model.train()
    step = DataParallel(model, devices(2), strategy="sharded").train_step(
        optax.sgd(0.1), lambda dp, x: jnp.mean(dp(x) ** 2))
    kernel = np.asarray(model.hidden.kernel[...])
    step(batch_of(2, 6))
    step(batch_of(3, 6))
    assert int(model.drop.rngs.count[...]) == 2
    assert not np.allclose(np.asarray(model.norm.mean[...]), 0.0)
    assert not np.allclose(np.asarray(model.hidden.kernel[...]), kernel)
    model(batch_of(4, 3))  # the caller's model is usable after the steps (nothing donated is left in it)


def test_train_step_refuses_explicit():
    with pytest.raises(UsageError, match="pmap"):
        DataParallel(Net(0), devices(2), strategy="explicit").train_step(optax.sgd(0.1), lambda dp, x: dp(x).sum())


# --- the four steps ---------------------------------------------------------------------------------


def test_replicate_parallel_apply_gather_equals_explicit():
    model, twin = Net(4, dropout=0.5), Net(4, dropout=0.5)
    model.train(), twin.train()
    x = batch_of(4, 7)
    replicas = dp_jax.replicate(model, devices(3))
    assert [r.hidden.kernel[...].devices() for r in replicas] == [{d} for d in devices(3)]
    assert [r.norm.mean[...].devices() for r in replicas] == [{d} for d in devices(3)]
    outputs = dp_jax.parallel_apply(replicas, dp_jax.scatter(x, devices(3)))
    out = dp_jax.gather(outputs, devices(3)[0])
    want = DataParallel(twin, devices(3))(x)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(want))
    np.testing.assert_array_equal(np.asarray(replicas[0].norm.mean[...]), np.asarray(twin.norm.mean[...]))
    assert np.allclose(np.asarray(model.norm.mean[...]), 0.0)  # the replicas are modules of their own


# --- graph mode pinned, no StateSharding/StateAxes ---------------------------------------------------


def test_graph_mode_is_pinned_and_tree_mode_default_changes_nothing():
    model, twin = Net(9), Net(9)
    model.train(), twin.train()
    x = batch_of(9, 6)
    want = DataParallel(twin, devices(3), strategy="pmap")(x)
    with nnx.set_graph_mode(False):  # the default Flax's "tree mode" FLIP plans
        out = DataParallel(model, devices(3), strategy="pmap")(x)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(want))
    np.testing.assert_array_equal(np.asarray(model.norm.var[...]), np.asarray(twin.norm.var[...]))
    pinned = 0
    for path in sorted(Path(inspect.getfile(dp_nnx)).parent.rglob("*.py")):  # every module of dp_jax
        source = path.read_text()
        assert "StateSharding" not in source and "StateAxes" not in source, path
        for call in ast.walk(ast.parse(source)):
            func = call.func if isinstance(call, ast.Call) else None
            if isinstance(func, ast.Attribute) and getattr(func.value, "id", "") == "nnx" and func.attr in {
                    "split", "state", "iter_graph", "iter_modules", "graphdef", "pure", "clone"}:
                assert any(k.arg == "graph" for k in call.keywords), f"{path.name}: {ast.unparse(call)}"
                pinned += 1
    assert pinned >= 4  # the walk found dp_jax's splits


# --- refusals -------------------------------------------------------------------------------------------


def test_data_parallel_of_nnx_model_is_data_parallel():
    """Before NNX support, DataParallel(nnx_model)(x) took the model as an apply fn and x as its variables:
    one device computed the whole batch (no chunks)."""
    dp = DataParallel(Net(1), devices(4), strategy="explicit")
    dp(batch_of(1, 8))
    assert dp.last_plan.chunk_sizes == (2, 2, 2, 2)


@pytest.mark.parametrize("call", ["data_parallel", "parallel_apply", "apply", "scatter"])
def test_nnx_model_refused_where_a_function_goes(call):
    model, x = Net(1), batch_of(1, 4)
    runs = {"data_parallel": lambda: dp_jax.data_parallel(model, {}, x, devices(2)),
            "parallel_apply": lambda: dp_jax.parallel_apply(model, [x], [x]),
            "apply": lambda: DataParallel(model, devices(2)).apply({}, x),
            "scatter": lambda: dp_jax.scatter(model, devices(2))}
    with pytest.raises(TypeError, match=r"NNX module \(Net\).*(DataParallel\(model|replicate|dp\(x\))"):
        runs[call]()


def test_linen_module_refused_where_an_nnx_module_goes():
    with pytest.raises(TypeError, match="linen Module.*variables"):
        dp_jax.replicate(LinenNet(), devices(2))
    with pytest.raises(TypeError, match="linen Module.*module.apply"):
        dp_jax.parallel_apply([LinenNet(), LinenNet()], [1, 2], [(), ()])


def test_array_in_a_static_attribute_is_refused_naming_its_path():
    import dataclasses

    @dataclasses.dataclass(frozen=True)
    class Config:
        scale: object

    class Scaled(nnx.Module):
        def __init__(self):
            self.layer = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
            self.config = Config(jnp.ones(2))

        def __call__(self, x):
            return self.layer(x) * self.config.scale

    with pytest.raises(TypeError, match=r"model\.config\.scale .*nnx\.Variable"):
        DataParallel(Scaled(), devices(2))(batch_of(0, 4))


def test_plain_array_attribute_is_carried_and_updated():
    class Counter(nnx.Module):
        def __init__(self):
            self.total = jnp.zeros(())

        def __call__(self, x):
            self.total = self.total + x.sum()
            return x

    model = Counter()
    x = batch_of(0, 6)
    DataParallel(model, devices(3), strategy="shard_map")(x)
    np.testing.assert_allclose(float(model.total), x[:2].sum(), rtol=1e-6)  # replica 0's, as a buffer


@pytest.mark.parametrize("train", [False, True])
def test_mutable_argument_refused_naming_the_mode(train):
    model = Net(0)
    model.train() if train else model.eval()
    with pytest.raises(UsageError, match="eval mode.*model.train" if not train else "train mode"):
        DataParallel(model, devices(2))(batch_of(0, 4), mutable=["batch_stats"])


# --- divergences from torch (docs/divergences.md, NNX), both sides shown ------------------------------


def test_plain_array_attribute_is_replicated_where_torch_shares_it():
    import torch

    import dp_torch

    torch_model = torch.nn.Linear(3, 2)
    torch_model.scale = torch.full((2,), 2.0)  # neither parameter nor buffer
    torch_replicas = dp_torch.replicate(torch_model, ["cpu"] * 3)
    assert all(r.scale is torch_model.scale for r in torch_replicas)  # torch: every replica shares the original

    class Scaled(nnx.Module):
        def __init__(self):
            self.layer = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
            self.scale = jax.device_put(jnp.full((2,), 2.0), jax.devices()[0])

    model = Scaled()
    replicas = dp_jax.replicate(model, devices(3))
    assert replicas[0].scale is model.scale
    assert [r.scale.devices() for r in replicas[1:]] == [{d} for d in devices(3)[1:]]  # NNX: copied


def test_replica_zero_batch_stats_reach_the_module_in_torch_but_not_in_nnx_replicate():
    import torch

    import dp_torch

    x = batch_of(7, 6)
    torch_model = torch.nn.BatchNorm1d(3)
    replicas = dp_torch.replicate(torch_model, ["cpu"] * 2)
    dp_torch.parallel_apply(replicas, dp_torch.scatter(torch.from_numpy(x), ["cpu"] * 2))
    assert not torch.allclose(torch_model.running_mean, torch.zeros(3))  # torch: replica 0 aliases the buffers

    model = nnx.BatchNorm(3, rngs=nnx.Rngs(0))
    model.train()
    nnx_replicas = dp_jax.replicate(model, devices(2))
    dp_jax.parallel_apply(nnx_replicas, dp_jax.scatter(x, devices(2)))
    assert np.allclose(np.asarray(model.mean[...]), 0.0)  # NNX: the replica's Variables are its own
    assert not np.allclose(np.asarray(nnx_replicas[0].mean[...]), 0.0)
    DataParallel(model, devices(2))(x)  # DataParallel writes replica 0's back, as torch's replica 0 does in place
    np.testing.assert_allclose(np.asarray(model.mean[...]), np.asarray(nnx_replicas[0].mean[...]), rtol=1e-6)
