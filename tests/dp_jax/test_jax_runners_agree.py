"""The eager and the traced runner of a mapped strategy share one gather: a user sees the same
warning, at their own line, and the same error on both paths (only the call label says which ran)."""
from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dp_jax import MAPPED_STRATEGIES as MAPPED
from dp_jax.data_parallel import DataParallel


def _sum_per_replica(variables, x):
    return jnp.sum(x * variables["w"])


def _warnings_of(call):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return [(str(w.message), w.category, w.filename) for w in caught]


def _label_free(error: Exception, strategy: str) -> str:
    """The message without the call label ("data_parallel(strategy='pmap')", plus " under jit" when traced)."""
    label = f"data_parallel(strategy={strategy!r})"
    text = str(error)
    assert text.startswith(label), text
    return text[len(label):].removeprefix(" under jit")


@pytest.mark.parametrize("batch", [8, 7])  # even, and chunks 2, 2, 2, 1
@pytest.mark.parametrize("strategy", MAPPED)
def test_a_scalar_per_replica_warns_the_same_text_at_the_user_s_line_eagerly_and_under_jit(strategy, batch):
    rng = np.random.default_rng(batch)
    variables = {"w": rng.standard_normal(3).astype(np.float32)}
    x = rng.standard_normal((batch, 3)).astype(np.float32)
    dp = DataParallel(_sum_per_replica, [0, 1, 2, 3], strategy=strategy)
    eager = _warnings_of(lambda: dp.apply(variables, x))
    # a fresh jit per call: the warning is raised while tracing
    traced = _warnings_of(lambda: jax.jit(lambda v, x: dp.apply(v, x))(variables, x))
    assert eager == traced == [(eager[0][0], UserWarning, __file__)]
    assert eager[0][0].startswith("Was asked to gather along dimension 0")


@pytest.mark.parametrize("strategy", MAPPED)
def test_a_scalar_per_replica_along_dim_1_is_the_same_error_eagerly_and_under_jit(strategy):
    rng = np.random.default_rng(3)
    variables = {"w": rng.standard_normal(1).astype(np.float32)}
    x = rng.standard_normal((2, 8)).astype(np.float32)
    dp = DataParallel(_sum_per_replica, [0, 1, 2, 3], dim=1, strategy=strategy)
    with pytest.raises(ValueError, match="scalar per replica") as eager:
        dp.apply(variables, x)
    with pytest.raises(ValueError, match="scalar per replica") as traced:
        jax.jit(lambda v, x: dp.apply(v, x))(variables, x)
    assert "under jit" in str(traced.value) and "under jit" not in str(eager.value)
    assert _label_free(eager.value, strategy) == _label_free(traced.value, strategy)
