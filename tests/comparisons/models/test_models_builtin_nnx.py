"""The built-in pairs' NNX twins: made once per process, from their abstract shapes, without compiling a program
(an eager NNX init compiles one per initialiser and shape: 17 more than the linen demo's 50)."""
from __future__ import annotations

import jax
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
