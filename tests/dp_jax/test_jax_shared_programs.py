"""Strategies that run the same program compile it once: on an uneven batch 'pmap' and 'sharded' both run the
switch program over stacked slots (dp_jax/strategies/switch.py), so the second strategy compiles nothing."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from _helpers_jax import counting_compiles, devices

import dp_jax


def _tanh_layer(variables, x):
    return jnp.tanh(x @ variables["w"] + variables["b"])


@pytest.mark.parametrize("batch, width", [(7, 3), (5, 6), (10, 5)])  # chunks 2,2,2,1; 2,2,1 + an idle device; 3,3,3,1
def test_pmap_and_sharded_share_one_switch_program_on_an_uneven_batch(batch, width):
    rng = np.random.default_rng(batch * 10 + width)
    variables = {"w": rng.standard_normal((width, 4)).astype(np.float32),
                 "b": rng.standard_normal(4).astype(np.float32)}
    x = rng.standard_normal((batch, width)).astype(np.float32)
    outputs, compiles = {}, {}
    for strategy in ("pmap", "sharded"):
        with counting_compiles() as counted:
            outputs[strategy] = np.asarray(dp_jax.DataParallel(_tanh_layer, devices(4), strategy=strategy)
                                           .apply(variables, x))
        compiles[strategy] = counted.count
    assert compiles["pmap"] >= 1 and compiles["sharded"] == 0, compiles
    np.testing.assert_array_equal(outputs["pmap"], outputs["sharded"])
    expected = np.tanh(x.astype(np.float64) @ variables["w"] + variables["b"])
    np.testing.assert_allclose(outputs["sharded"], expected, rtol=1e-5, atol=1e-6)


def test_shard_map_lays_the_batch_out_flat_and_compiles_its_own_switch_program():
    rng = np.random.default_rng(11)
    variables = {"w": rng.standard_normal((7, 4)).astype(np.float32), "b": np.zeros(4, np.float32)}
    x = rng.standard_normal((9, 7)).astype(np.float32)  # chunks 3, 3, 3 on 4 devices: one idle
    outputs = {}
    for strategy in ("pmap", "shard_map"):
        with counting_compiles() as counted:
            outputs[strategy] = np.asarray(dp_jax.DataParallel(_tanh_layer, devices(4), strategy=strategy)
                                           .apply(variables, x))
    assert counted.count >= 1  # its own layout: another program
    np.testing.assert_allclose(outputs["shard_map"], outputs["pmap"], rtol=1e-6, atol=1e-7)
