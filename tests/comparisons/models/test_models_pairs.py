"""Every built-in pair computes the same function in torch and Flax once weights are converted."""
import jax
import numpy as np
import pytest
from _helpers_models import assert_pair_agrees

from comparisons import models

# (seed, batch size): different per dtype so each pair sees two seeds and two batch sizes
CASES = {np.float32: (0, 5), np.float64: (7, 3)}


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", models.names())
def test_pair_gives_same_output_grads_and_buffers_in_torch_and_flax(name, dtype):
    seed, batch = CASES[dtype]
    with jax.enable_x64(dtype == np.float64):
        assert_pair_agrees(models.get(name), seed, batch, dtype, train=True)


def test_batchnorm_pair_agrees_in_eval_mode_using_running_stats():
    assert_pair_agrees(models.get("cnn_bn"), seed=3, batch_size=4, dtype=np.float32, train=False)


def test_float64_pair_really_computes_in_float64():
    with jax.enable_x64(True):
        torch_module, flax_module, variables = models.get("mlp").build(seed=2, dtype=np.float64)
        (x,), _ = models.get("mlp").make_inputs(2, 2, np.float64)
        assert flax_module.apply(variables, x).dtype == np.float64
    assert next(torch_module.parameters()).dtype == __import__("torch").float64
    assert variables["params"]["fc1"]["kernel"].dtype == np.float64


def test_inputs_depend_on_seed_and_batch_size():
    pair = models.get("cnn_bn")
    (a,), labels = pair.make_inputs(4, 0, np.float32)
    (b,), _ = pair.make_inputs(4, 1, np.float32)
    assert a.shape == (4, 3, 8, 8) and labels.shape == (4,) and not np.array_equal(a, b)
    (nhwc,) = pair.to_flax_inputs((a,))
    assert nhwc.shape == (4, 8, 8, 3) and nhwc[1, 2, 5, 0] == a[1, 0, 2, 5]
