"""DataParallel inside jax.jit, and the compiled data-parallel step (value_and_grad, train_step).

References are written from torch's rules, not from dp_jax: split the batch into ceil(B/n)-row
chunks, apply the model to each chunk on one device, concatenate, take the loss on the result;
BatchNorm statistics are chunk 0's. Batches cover even, uneven, and fewer chunks than devices.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from _chunks import torch_chunks
from _helpers_jax import chunked_reference as chunked
from _helpers_jax import counting_compiles, devices
from _models_jax import make
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

import dp_jax
from dp_jax import MAPPED_STRATEGIES as MAPPED

N = 4
BATCHES = (8, 11, 5, 2)  # equal chunks; 3,3,3,2; 2,2,1 (3 replicas on 4 devices); 1,1


def row_mixing(variables, a):
    """Mixes rows inside its chunk: a padding row would change every row's result."""
    h = a @ variables["w"]
    return h - h.mean(0)


def mixing_variables(seed):
    return {"w": jnp.asarray(np.random.default_rng(seed).normal(size=(3, 2)).astype(np.float32))}


def close(actual, expected, atol=2e-6):
    jax.tree.map(lambda a, e: np.testing.assert_allclose(np.asarray(a), np.asarray(e), atol=atol, rtol=2e-5),
                 actual, expected)


def replicated_on(tree, devs):
    for leaf in jax.tree.leaves(tree):
        assert isinstance(leaf.sharding, NamedSharding) and leaf.sharding.spec == P(), leaf.sharding
        assert leaf.sharding.device_set == set(devs)


# --- 1. apply inside jax.jit ----------------------------------------------------------------------

@pytest.mark.parametrize("strategy", MAPPED)
@pytest.mark.parametrize("batch", BATCHES)
def test_apply_under_jit_equals_torch_chunks_for_a_row_mixing_model(strategy, batch):
    variables, x = mixing_variables(batch), np.random.default_rng(batch).normal(size=(batch, 3)).astype(np.float32)
    dp = dp_jax.DataParallel(row_mixing, devices(N), strategy=strategy)
    out = jax.jit(dp.apply)(variables, x)
    expected, _ = chunked(row_mixing, variables, x, N)
    close(out, expected)
    replicated_on(out, devices(N))  # gathered: a full copy on every device, output_device included


@pytest.mark.parametrize("strategy", MAPPED)
def test_jit_of_grad_through_apply_equals_the_single_device_gradient(strategy):
    model, variables, x = make("convbn", 11, seed=3)
    y = np.random.default_rng(4).normal(size=(11, 3)).astype(np.float32)
    dp = dp_jax.DataParallel(model, devices(N), strategy=strategy)

    def loss(v, x, y):
        out, updates = dp.apply(v, x, train=True, mutable=["batch_stats"])
        return jnp.mean((out - y) ** 2), updates

    (value, updates), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(variables, x, y)

    def reference(v):
        out, stats = chunked(model.apply, v, x, N, train=True, mutable=["batch_stats"])
        return jnp.mean((out - y) ** 2), stats

    (ref_value, ref_stats), ref_grads = jax.value_and_grad(reference, has_aux=True)(variables)
    close(value, ref_value)
    close(grads, ref_grads, atol=1e-5)
    close(updates, ref_stats)  # chunk 0's statistics, as torch's replica 0 keeps


@pytest.mark.parametrize("strategy", MAPPED)
def test_an_output_that_does_not_grow_with_the_chunk_is_gathered_whole_under_jit(strategy):
    # a.mean(0) is 3 values per replica whatever the chunk; with 3 features the full chunk's 3 rows
    # coincide with them, and the short chunk's 3 values must not be cut to its 2 rows
    a = np.arange(33, dtype=np.float32).reshape(11, 3)
    out = jax.jit(dp_jax.DataParallel(lambda v, a: a.mean(0), devices(N), strategy=strategy).apply)({}, a)
    expected = np.concatenate([a[rows].mean(0) for rows in torch_chunks(11, N)])
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-6)


def test_dropout_under_jit_draws_replica_i_from_fold_in_key_i():
    model, variables, x = make("mlp", 7, seed=5)
    key = jax.random.key(9)
    dp = dp_jax.DataParallel(model, devices(N), strategy="shard_map")
    out = jax.jit(lambda v, x, k: dp.apply(v, x, train=True, rngs={"dropout": k}))(variables, x, key)
    expected = [model.apply(variables, jnp.asarray(x[rows]), train=True, rngs={"dropout": jax.random.fold_in(key, i)})
                for i, rows in enumerate(torch_chunks(7, N))]
    close(out, jnp.concatenate(expected))


def test_sync_collections_under_jit_is_the_mean_over_the_replicas_that_ran():
    model, variables, x = make("convbn", 5, seed=6)  # chunks 2, 2, 1: three replicas on four devices
    dp = dp_jax.DataParallel(model, devices(N), strategy="pmap", sync_collections=True)
    _, stats = jax.jit(lambda v, x: dp.apply(v, x, train=True, mutable=["batch_stats"]))(variables, x)
    per_chunk = [model.apply(variables, jnp.asarray(x[rows]), train=True, mutable=["batch_stats"])[1]
                 for rows in torch_chunks(5, N)]
    close(stats, jax.tree.map(lambda *leaves: jnp.mean(jnp.stack(leaves), 0), *per_chunk))


def test_explicit_under_jit_refuses_and_names_the_mapped_strategies():
    dp = dp_jax.DataParallel(row_mixing, devices(N), strategy="explicit")
    with pytest.raises(ValueError, match="explicit") as raised:
        jax.jit(dp.apply)(mixing_variables(0), np.ones((4, 3), np.float32))
    assert all(repr(name) in str(raised.value) for name in MAPPED)
    # eager jax.grad keeps working with 'explicit'
    grads = jax.grad(lambda v: dp.apply(v, np.ones((4, 3), np.float32)).sum())(mixing_variables(0))
    assert np.isfinite(np.asarray(grads["w"])).all()


def test_committed_arguments_in_a_plain_jit_meet_jax_s_own_error_and_the_compiled_step_accepts_them():
    variables = jax.device_put(mixing_variables(1), devices(N)[0])
    x = jax.device_put(np.ones((8, 3), np.float32), devices(N)[0])
    dp = dp_jax.DataParallel(row_mixing, devices(N), strategy="sharded")
    with pytest.raises(ValueError, match="Received incompatible devices"):
        jax.jit(lambda v, x: dp.apply(v, x).sum())(variables, x)
    loss, grads = dp.value_and_grad(lambda v, x: dp.apply(v, x).sum())(variables, x)
    close(grads, jax.grad(lambda v: chunked(row_mixing, v, np.ones((8, 3), np.float32), N)[0].sum())(variables))
    assert variables["w"].devices() == {devices(N)[0]}  # the caller's arrays are left where they were


# --- 2. the compiled step -------------------------------------------------------------------------

@pytest.mark.parametrize("strategy", MAPPED)
@pytest.mark.parametrize("batch", BATCHES)
def test_value_and_grad_equals_single_device_and_eager_gradients(strategy, batch):
    model, variables, x = make("convbn", batch, seed=batch)
    y = np.random.default_rng(batch + 1).normal(size=(batch, 3)).astype(np.float32)
    dp = dp_jax.DataParallel(model, devices(N), strategy=strategy)
    eager = dp_jax.DataParallel(model, devices(N), strategy="explicit")

    def loss_with(wrapper):
        def loss(v, x, y):
            out, updates = wrapper.apply(v, x, train=True, mutable=["batch_stats"])
            return jnp.mean((out - y) ** 2), updates
        return loss

    (value, stats), grads = dp.value_and_grad(loss_with(dp), has_aux=True)(variables, x, y)
    (_, eager_stats), eager_grads = jax.value_and_grad(loss_with(eager), has_aux=True)(variables, x, y)
    single = jax.grad(lambda v: jnp.mean((chunked(model.apply, v, x, N, train=True, mutable=["batch_stats"])[0]
                                          - y) ** 2))(variables)
    close(grads, single, atol=1e-5)
    close(grads, eager_grads, atol=1e-5)
    close(stats, eager_stats)
    replicated_on((value, grads), devices(N))


def test_the_batch_is_placed_in_torch_chunks_one_per_device():
    dp = dp_jax.DataParallel(row_mixing, devices(N), strategy="shard_map")
    step = dp.value_and_grad(lambda v, x: dp.apply(v, x).sum())
    x = np.arange(33, dtype=np.float32).reshape(11, 3)
    placed, size, _ = step.placement.batch((x,), "test")
    shards = sorted(placed[0].addressable_shards, key=lambda s: devices(N).index(s.device))
    # device i holds torch's chunk i; the short chunk's device has an unread zero slot after its rows
    for i, rows in enumerate(torch_chunks(11, N)):
        data = np.asarray(shards[i].data).reshape(-1, 3)
        np.testing.assert_array_equal(data[: rows.stop - rows.start], x[rows])
    assert size == 11 and not np.asarray(shards[3].data).reshape(-1, 3)[2:].any()


def dp_torch_loop(optimizer, steps, batch, seed):
    """PyTorch's DataParallel loop (loss on the gathered output, backward, optimizer.step()) with dp_torch."""
    import torch

    import dp_torch

    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    x = torch.from_numpy(np.random.default_rng(seed).normal(size=(batch, 5)).astype(np.float32))
    y = torch.from_numpy(np.random.default_rng(seed + 1).normal(size=(batch, 3)).astype(np.float32))
    init = {name: p.detach().numpy().copy() for name, p in net.named_parameters()}
    wrapper = dp_torch.DataParallel(net, ["cpu"] * N)
    opt = {"sgd": lambda p: torch.optim.SGD(p, lr=0.05),
           "momentum": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
           "adam": lambda p: torch.optim.Adam(p, lr=0.01)}[optimizer](net.parameters())
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(wrapper(x), y).backward()
        opt.step()
    return init, x.numpy(), y.numpy(), {name: p.detach().numpy() for name, p in net.named_parameters()}


def torch_mlp_as_jax(init):
    params = {"l0": {"w": init["0.weight"].T, "b": init["0.bias"]},
              "l2": {"w": init["2.weight"].T, "b": init["2.bias"]}}

    def apply(variables, x):
        p = variables["params"]
        return jnp.tanh(x @ p["l0"]["w"] + p["l0"]["b"]) @ p["l2"]["w"] + p["l2"]["b"]
    return apply, jax.tree.map(jnp.asarray, params)


@pytest.mark.parametrize("optimizer,tx", [("sgd", optax.sgd(0.05)), ("momentum", optax.sgd(0.05, momentum=0.9)),
                                          ("adam", optax.adam(0.01))])
def test_k_train_steps_equal_pytorch_s_data_parallel_loop(optimizer, tx):
    init, x, y, torch_after = dp_torch_loop(optimizer, steps=3, batch=11, seed=7)
    apply, params = torch_mlp_as_jax(init)
    dp = dp_jax.DataParallel(apply, devices(N), strategy="shard_map")
    step = dp.train_step(tx, lambda v, x, y: jnp.mean((dp.apply(v, x) - y) ** 2))
    opt_state, collections = tx.init(params), {}
    for _ in range(3):
        params, opt_state, collections, loss = step(params, opt_state, collections, x, y)
    replicated_on((params, opt_state), devices(N))
    close(params["l0"]["w"], torch_after["0.weight"].T, atol=2e-5)
    close(params["l2"]["b"], torch_after["2.bias"], atol=2e-5)


@pytest.mark.parametrize("strategy", MAPPED)
@pytest.mark.parametrize("batch", (11, 8))
def test_train_step_with_return_grads_returns_each_step_s_gradient_from_its_one_program(strategy, batch):
    init, x, y, _ = dp_torch_loop("sgd", steps=0, batch=batch, seed=batch + len(strategy))
    apply, params = torch_mlp_as_jax(init)
    dp = dp_jax.DataParallel(apply, devices(N), strategy=strategy)
    tx = optax.sgd(0.05, momentum=0.9)
    step = dp.train_step(tx, lambda v, x, y: jnp.mean((dp.apply(v, x) - y) ** 2), return_grads=True)

    def one_device_loss(p):
        return jnp.mean((chunked(apply, {"params": p}, x, N)[0] - y) ** 2)

    opt_state, collections, expected_params, expected_state = tx.init(params), {}, params, tx.init(params)
    for _ in range(3):
        expected_grads = jax.grad(one_device_loss)(expected_params)  # at the params the step starts from
        params, opt_state, collections, loss, grads = step(params, opt_state, collections, x, y)
        updates, expected_state = tx.update(expected_grads, expected_state, expected_params)
        expected_params = optax.apply_updates(expected_params, updates)
        close(grads, expected_grads, atol=1e-5)
        replicated_on(grads, devices(N))
    close(params, expected_params, atol=2e-5)
    assert step.compiles() == 1  # the gradients come out of the train step's own program


def test_train_step_keeps_batchnorm_statistics_of_chunk_0_and_leaves_the_caller_s_arrays_alive():
    model, variables, x = make("convbn", 10, seed=11)  # chunks 3, 3, 3, 1
    y = np.random.default_rng(12).normal(size=(10, 3)).astype(np.float32)
    tx = optax.sgd(0.1)
    dp = dp_jax.DataParallel(model, devices(N), strategy="pmap")

    def loss(v, x, y):
        out, updates = dp.apply(v, x, train=True, mutable=["batch_stats"])
        return jnp.mean((out - y) ** 2), updates

    step = dp.train_step(tx, loss, has_aux=True)
    params, stats = variables["params"], {"batch_stats": variables["batch_stats"]}
    new_params, _, new_stats, _ = step(params, tx.init(params), stats, x, y)
    _, expected = model.apply(variables, jnp.asarray(x[:3]), train=True, mutable=["batch_stats"])
    close(new_stats, expected)
    grads = jax.grad(lambda p: jnp.mean((chunked(model.apply, {"params": p, **stats}, x, N, train=True,
                                                 mutable=["batch_stats"])[0] - y) ** 2))(params)
    close(new_params, jax.tree.map(lambda p, g: p - 0.1 * g, params, grads), atol=1e-5)
    assert np.isfinite(np.asarray(jax.tree.leaves(variables["params"])[0])).all()  # not donated away


def test_a_repeated_step_compiles_nothing_and_a_new_shape_compiles_once():
    model, variables, x = make("mlp", 8, seed=13)
    tx = optax.adam(0.01)
    dp = dp_jax.DataParallel(model, devices(N), strategy="sharded")
    step = dp.train_step(tx, lambda v, x: jnp.mean(dp.apply(v, x) ** 2))
    state = [variables["params"], tx.init(variables["params"]), {}]
    *state, _ = step(*state, x)
    assert step.compiles() == 1
    previous = jax.tree.leaves(state[:2])
    with counting_compiles() as counter:
        *state, loss = step(*state, x)
        jax.block_until_ready(loss)
    assert counter.count == 0
    assert all(leaf.is_deleted() for leaf in previous)  # donated: updated in place, not copied
    with counting_compiles() as counter:
        *state, loss = step(*state, x[:6])
        jax.block_until_ready(loss)
    assert step.compiles() == 2 and counter.count == 1


def plateau_after_sgd():
    """sgd, then a scale that halves whenever the loss has not fallen by 90 %: it needs update(..., value=loss)."""
    from optax.contrib import reduce_on_plateau

    return optax.chain(optax.sgd(0.1), reduce_on_plateau(factor=0.5, patience=1, rtol=0.9, accumulation_size=1))


@pytest.mark.parametrize("strategy, batch", [("shard_map", 11), ("pmap", 8), ("sharded", 5)])
def test_train_step_passes_the_loss_as_value_to_an_optimizer_that_takes_it(strategy, batch):
    model, variables, x = make("mlp", batch, seed=21)
    y = np.random.default_rng(22).normal(size=(batch, 4)).astype(np.float32)
    tx = plateau_after_sgd()
    dp = dp_jax.DataParallel(model, devices(N), strategy=strategy)
    step = dp.train_step(tx, lambda v, x, y: jnp.mean((dp.apply(v, x) - y) ** 2))
    params = variables["params"]
    state = [params, tx.init(params), {}]
    expected_params, expected_state = params, tx.init(params)  # one device, the whole batch (a row-wise model)
    for _ in range(4):
        *state, loss = step(*state, x, y)
        value, grads = jax.value_and_grad(lambda p: jnp.mean((model.apply({"params": p}, x) - y) ** 2))(
            expected_params)
        updates, expected_state = tx.update(grads, expected_state, expected_params, value=value)
        expected_params = optax.apply_updates(expected_params, updates)
    assert float(expected_state[1].scale) < 1  # the plateau was reached: the value mattered
    close(state[1][1].scale, expected_state[1].scale)
    close(state[0], expected_params, atol=1e-5)


def test_errors_name_the_argument_and_the_fix():
    explicit = dp_jax.DataParallel(row_mixing, devices(N), strategy="explicit")
    with pytest.raises(ValueError, match="'shard_map'"):
        explicit.value_and_grad(lambda v, x: explicit.apply(v, x).sum())
    dp = dp_jax.DataParallel(row_mixing, devices(N), strategy="shard_map")
    with pytest.raises(TypeError, match="GradientTransformation"):
        dp.train_step(optax.sgd, lambda v, x: 0.0)
    step = dp.value_and_grad(lambda v, x, flag: dp.apply(v, x).sum())
    with pytest.raises(TypeError, match=r"batch leaf batch\[1\] is bool"):
        step(mixing_variables(0), np.ones((4, 3), np.float32), True)


def _gpus() -> list:
    try:
        return jax.devices("gpu")
    except RuntimeError:
        return []


@pytest.mark.gpu
@pytest.mark.skipif(not _gpus(), reason="needs a JAX GPU backend")
@pytest.mark.parametrize("batch", [8, 5])
def test_train_step_on_the_gpus_equals_one_device_sgd(batch):
    gpus = _gpus()
    model, variables, x = make("mlp", batch, seed=21)
    y = np.random.default_rng(22).normal(size=(batch, 4)).astype(np.float32)
    tx = optax.sgd(0.1)
    dp = dp_jax.DataParallel(model, gpus, strategy="shard_map")
    step = dp.train_step(tx, lambda v, x, y: jnp.mean((dp.apply(v, x) - y) ** 2))
    params, _, _, _ = step(variables["params"], tx.init(variables["params"]), {}, x, y)
    grads = jax.grad(lambda p: jnp.mean((chunked(model.apply, {"params": p}, x, len(gpus))[0] - y) ** 2))(
        jax.device_put(variables["params"], gpus[0]))
    close(params, jax.tree.map(lambda p, g: p - 0.1 * g, variables["params"], grads), atol=1e-5)
    assert {d.platform for d in jax.tree.leaves(params)[0].sharding.device_set} == {"gpu"}


def test_collectives_under_jit_span_every_replica_on_an_even_batch_and_refuse_a_ragged_one():
    model, variables, x = make("convbn", 8, seed=23, axis_name="replicas_bn")
    dp = dp_jax.DataParallel(model, devices(N), strategy="shard_map", axis_name="replicas_bn")
    run = jax.jit(lambda v, x: dp.apply(v, x, train=True, mutable=["batch_stats"]))
    _, stats = run(variables, x)
    # true SyncBatchNorm: the statistics of the whole batch, as one device computes them
    _, whole = make("convbn", 8, seed=23)[0].apply(variables, jnp.asarray(x), train=True, mutable=["batch_stats"])
    close(stats, whole, atol=1e-5)
    with pytest.raises(ValueError, match=r"axis_name='replicas_bn'.*chunks \(3, 3, 3, 2\)"):
        run(variables, make("convbn", 11, seed=23)[2])


def test_padding_mode_is_eager_only_and_says_so_under_jit():
    dp = dp_jax.DataParallel(row_mixing, devices(N), strategy="pmap", uneven="pad")
    with pytest.raises(ValueError, match="uneven='exact'"):
        jax.jit(dp.apply)(mixing_variables(2), np.ones((5, 3), np.float32))


@pytest.mark.parametrize("strategy", MAPPED)
@pytest.mark.parametrize("batch, axis_name", [(8, None), (7, None), (8, "batch"), (12, "data")])  # uneven: no axis
def test_params_the_user_replicated_on_the_mesh_stay_valid_and_only_the_steps_own_outputs_are_donated(
        strategy, batch, axis_name):
    """docs/training.md's fix 2 replicates params on the step's mesh (its axis: the one bound, else
    REPLICA_AXIS); the step kept them as they were, donated them and deleted the user's arrays."""
    from dp_jax.strategies import REPLICA_AXIS

    model, variables, x = make("mlp", batch, seed=batch)
    dp = dp_jax.DataParallel(model, devices(N), strategy=strategy, axis_name=axis_name)
    tx = optax.sgd(0.1)
    step = dp.train_step(tx, lambda v, x: jnp.mean(dp.apply(v, x) ** 2))
    mesh = jax.sharding.Mesh(np.array(devices(N)), (axis_name or REPLICA_AXIS,), axis_types=(AxisType.Auto,))
    mine = jax.device_put(variables["params"], NamedSharding(mesh, P()))  # replicated, as fix 2 does
    # the expected values from a second init: a numpy view of `mine` (or of what it was put from) would
    # pin its buffers, and JAX silently copies a pinned buffer instead of donating it
    before = jax.tree.map(np.asarray, make("mlp", batch, seed=batch)[1]["params"])
    params, opt_state, collections, _ = step(mine, tx.init(mine), {}, x)
    assert not any(leaf.is_deleted() for leaf in jax.tree.leaves(mine))
    jax.tree.map(np.testing.assert_array_equal, jax.tree.map(np.asarray, mine), before)
    returned = jax.tree.leaves(params)
    params, opt_state, collections, _ = step(params, opt_state, collections, x)
    assert all(leaf.is_deleted() for leaf in returned)  # the step's own outputs are still donated


def test_params_an_earlier_step_donated_are_refused_naming_the_leaf():
    """Passed again, a deleted array crashed the interpreter (SIGSEGV) inside the jitted call."""
    model, variables, x = make("mlp", 8, seed=3)
    dp = dp_jax.DataParallel(model, devices(N), strategy="shard_map")
    tx = optax.sgd(0.1)
    step = dp.train_step(tx, lambda v, x: jnp.mean(dp.apply(v, x) ** 2))
    first = step(variables["params"], tx.init(variables["params"]), {}, x)
    step(*first[:3], x)  # donates first's params
    with pytest.raises(dp_jax.UsageError, match=r"params\['Dense_0'\]\['bias'\] was donated to an earlier call"):
        step(*first[:3], x)


@pytest.mark.parametrize("strategy", MAPPED)
def test_value_and_grad_leaves_an_integer_counter_in_the_variables_undifferentiated(strategy):
    # torch's num_batches_tracked, carried in a collection as torch's traced models carry it: an int leaf
    rng = np.random.default_rng()
    w = jnp.asarray(rng.standard_normal((3, 2)), jnp.float32)
    x = jnp.asarray(rng.standard_normal((7, 3)), jnp.float32)
    count = int(rng.integers(0, 100))

    def apply(variables, x):
        return x @ variables["params"]["w"] + variables["counters"]["seen"].astype(jnp.float32)

    wrapper = dp_jax.DataParallel(apply, devices(4), strategy=strategy)
    step = wrapper.value_and_grad(lambda variables, x: (wrapper.apply(variables, x) ** 2).sum())
    variables = {"params": {"w": w}, "counters": {"seen": jnp.asarray(count, jnp.int32)}}
    loss, grads = step(variables, x)
    expected = jax.grad(lambda w: ((x @ w + count) ** 2).sum())(w)
    np.testing.assert_allclose(np.asarray(grads["params"]["w"]), np.asarray(expected), rtol=1e-5, atol=1e-5)
    assert grads["counters"]["seen"].dtype == jax.dtypes.float0
