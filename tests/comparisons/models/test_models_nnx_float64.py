"""The NNX side's steps are nnx.Optimizer's; its float64 run is float64 everywhere without editing the twin
(nnx.Embed fixes float32 at construction), and a torch parameter the NNX optimizer
would never update is refused by name."""
from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from _nnx_twins import NNXMLP, TorchMLP, lm_inputs, lm_pair, mlp_inputs
from flax import nnx

from comparisons import ComparisonError
from comparisons.models import pair_from_modules


def _float_dtypes(module, variables, inputs) -> set[str]:
    """Every float type in the traced forward, nested programs included: its inputs, outputs and intermediates."""
    jaxpr = str(jax.make_jaxpr(lambda v, x: module.apply(v, x))(variables, inputs))
    return set(re.findall(r"\b(bf16|f16|f32|f64)\[", jaxpr))


def test_the_float64_run_of_an_nnx_twin_computes_in_float64_at_every_value():
    seed = int(np.random.default_rng().integers(0, 1000))
    pair = lm_pair(seed=seed)
    with jax.enable_x64(True):
        torch_module, model, variables = pair.build(seed=seed, dtype=np.float64)
        (tokens,), _ = lm_inputs(3, seed, np.float64)
        written = pair.jax_side.make(pair)  # the twin as the user wrote it
        assert "f32" in _float_dtypes(written, variables, tokens)  # nnx.Embed's dtype float32: part in float32
        dtypes = _float_dtypes(model, variables, tokens)  # built for a float64 run: every run computes in it
        assert dtypes == {"f64"}, dtypes
        assert written.model.embed.dtype == jnp.float32  # the user's module is untouched
        logits = np.asarray(model.apply(variables, tokens))
    with torch.no_grad():
        expected = torch_module(torch.from_numpy(tokens).long()).numpy()
    np.testing.assert_allclose(logits, expected, rtol=1e-12, atol=1e-12)


class NNXFrozenHead(NNXMLP):
    """The head's bias held in a plain nnx.Variable: nnx.Optimizer(model, tx, wrt=nnx.Param) never updates it."""

    def __init__(self, *, rngs: nnx.Rngs):
        super().__init__(rngs=rngs)
        self.head.bias = nnx.Variable(self.head.bias[...])


def test_a_torch_parameter_on_a_plain_nnx_variable_fails_naming_it():
    pair = pair_from_modules("frozen", TorchMLP(), NNXFrozenHead(rngs=nnx.Rngs(0)), make_inputs=mlp_inputs,
                             loss_torch=lambda out, y: out.mean(),
                             loss_jax=lambda out, y: out.mean())
    with pytest.raises(ComparisonError) as error:
        pair.build()
    message = str(error.value)
    assert "\n" not in message
    assert "`head.bias` is an nnx.Variable, not an nnx.Param" in message and "head.bias" in message.split("trains")[1]


def test_the_harness_steps_an_nnx_twin_as_nnx_optimizer_wrt_param_does():
    """optax on the 'params' collection (what the harness runs) equals nnx.Optimizer(model, tx, wrt=nnx.Param)."""
    import optax

    from comparisons.models.jax_nnx import NNXApply

    seed = int(np.random.default_rng().integers(0, 1000))
    model = NNXMLP(rngs=nnx.Rngs(seed))
    (x,), y = mlp_inputs(5, seed, np.float32)
    adapter = NNXApply(model)
    variables = adapter.init()
    tx = optax.sgd(0.05, momentum=0.9)

    def loss(params):
        logits, _ = adapter.apply({**variables, "params": params}, x, train=True, mutable=["batch_stats"])
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
    params, opt_state = variables["params"], tx.init(variables["params"])
    optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)
    model.train()
    for _ in range(2):
        updates, opt_state = tx.update(jax.grad(loss)(params), opt_state, params)
        params = optax.apply_updates(params, updates)
        grads = nnx.grad(lambda m: optax.softmax_cross_entropy_with_integer_labels(m(x), y).mean())(model)
        optimizer.update(model, grads)
    stepped = NNXApply(model).init()["params"]
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7), params, stepped)
