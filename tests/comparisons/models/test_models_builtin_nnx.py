"""The built-in pairs' NNX twins: made once per process, from their abstract shapes, without compiling a program
(an eager NNX init compiles one per initialiser and shape: 17 more than the linen demo's 50)."""
from __future__ import annotations

import jax
import numpy as np
import pytest
from _helpers_jax import counting_compiles
from flax import nnx

from comparisons.models import builtin, nnx_nets
from comparisons.models.jax_nnx import is_nnx_module


def shapes(model) -> dict:
    return {path: (type(var).__name__, var.get_value().shape, str(var.get_value().dtype))
            for path, var in nnx.to_flat_state(nnx.state(model))}


@pytest.mark.parametrize("name", ["MLP", "CNNBN", "TransformerBlock", "EmbeddingLSTM"])
def test_making_a_builtin_nnx_twin_compiles_no_program_and_keeps_every_variable(name):
    make = builtin._nnx_net(name)  # a fresh maker: nothing made yet
    jax.clear_caches()  # an eager init's programs may be cached by an earlier test
    with counting_compiles() as compiles:
        model = make()
    assert compiles.count == 0
    assert is_nnx_module(model) and make() is model
    assert shapes(model) == shapes(nnx.eval_shape(lambda: getattr(nnx_nets, name)(rngs=nnx.Rngs(0))))


def test_a_twin_holding_rng_state_applies_under_jit_as_eagerly():
    """nnx.RNN keeps an RNG stream for its carry's initialiser and counts each use: the jitted apply must change a
    copy made inside the trace (NNX refuses a Variable made outside it: seen failing, TraceContextError)."""
    pair = builtin.BUILTIN_NNX[3]
    assert pair.name == "embedding_lstm"
    seed = int(np.random.default_rng().integers(0, 2**16))
    built = pair.build(seed=seed)
    inputs, _ = pair.make_inputs(3, seed, np.float32)
    jitted = jax.jit(lambda variables, *x: built.flax.apply(variables, *x))(built.variables, *inputs)
    np.testing.assert_allclose(jitted, built.flax.apply(built.variables, *inputs), rtol=1e-6, atol=1e-7)
