"""compare()'s arguments are checked before any work runs; a user pair's own functions are checked by name."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import numpy as np
import pytest
from _helpers_harness import ROOT

from comparisons import ComparisonError, harness, models


@pytest.fixture
def no_work(monkeypatch):
    """compare() must fail before it builds models or runs a step: both raise here."""
    def work(*args, **kwargs):
        raise AssertionError("compare() started working before checking its arguments")
    monkeypatch.setattr(models.ModelPair, "build", work)  # compare() builds a pair once, before any run


@pytest.mark.parametrize("kwargs, message", [
    ({"strategies": "explicit"}, "strategies='explicit' is one string; pass a list, strategies=['explicit']"),
    ({"strategies": 3}, "strategies=3 is not a list of names"),
    ({"seed": -1}, "seed=-1; pass an integer from 0 to 4294967295"),
    ({"seed": "7"}, "seed='7' (a str); pass an integer from 0 to 4294967295"),
    ({"seed": 2.5}, "seed=2.5 (a float); pass an integer from 0 to 4294967295"),
    ({"seed": True}, "seed=True (a bool)"),
    ({"progress": "bar"}, "progress='bar' is not callable; pass a function progress(label: str, total_steps: int)"),
    ({"batch_size": "10"}, "batch_size='10' (a str); pass a positive integer"),
    ({"batch_size": 4.0}, "batch_size=4.0 (a float); pass a positive integer"),
    ({"devices": [2]}, "devices=[2] (a list); pass a positive integer"),
    ({"devices": 0, "torch_devices": "auto"}, "compare: devices=0; pass a positive integer"),
    ({"devices": -2, "torch_devices": "auto"}, "compare: devices=-2; pass a positive integer"),
    ({"torch_devices": "gpu"}, "torch_devices='gpu' is not supported; use one of auto, cpu, virtual, cuda"),
])
def test_a_bad_argument_is_refused_before_any_work(no_work, kwargs, message):
    settings = {"batch_size": 6, "devices": 2, "steps": 1, "torch_devices": "cpu"} | kwargs
    with pytest.raises(ComparisonError) as raised:
        harness.compare("mlp", **settings)
    assert message in str(raised.value)


def machine_memory() -> int:
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def bytes_per_row(pair: str, dtype: str = "float32") -> float:
    """Measured here at batches 8 and 16, apart from the harness's own probe."""
    def size(batch):
        inputs, targets = models.get(pair).make_inputs(batch, 0, np.dtype(dtype))
        return sum(np.asarray(x).nbytes for x in (*inputs, targets))
    return (size(16) - size(8)) / 8


@pytest.mark.parametrize("pair, batch_size, dtype", [("mlp", 99999999999, "float32"), ("cnn_bn", 2**40, "float64"),
                                                     ("transformer_block", 10**12, "float32"),
                                                     ("embedding_lstm", 3 * 10**11, "float32")])
def test_a_batch_whose_inputs_exceed_the_machine_memory_is_refused_naming_what_it_needs(no_work, pair, batch_size,
                                                                                         dtype):
    with pytest.raises(ComparisonError) as raised:
        harness.compare(pair, batch_size=batch_size, devices=2, steps=1, dtype=dtype, torch_devices="cpu")
    message = str(raised.value)
    assert message.startswith(f"compare: batch_size={batch_size}: the inputs of pair {pair!r} alone need ")
    assert "more than this machine's" in message
    largest = int(message.rsplit("pass batch_size <= ", 1)[1].split()[0].rstrip(","))
    per_row = bytes_per_row(pair, dtype)
    assert largest * per_row <= machine_memory() < (largest + 8) * per_row  # within a few rows of the limit


@pytest.mark.parametrize("pair", ["mlp", "cnn_bn"])
def test_a_large_batch_that_fits_in_memory_is_not_refused(no_work, pair):
    batch_size = int(machine_memory() / bytes_per_row(pair) / 50)  # 2 % of the memory
    with pytest.raises(AssertionError, match="started working"):
        harness.compare(pair, batch_size=batch_size, devices=2, steps=1, torch_devices="cpu")


def test_the_cli_refuses_a_batch_too_large_for_memory_with_exit_2():
    result = subprocess.run([sys.executable, "-m", "comparisons", "run", "--model", "mlp", "--batch", "99999999999"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr
    assert "batch_size=99999999999: the inputs of pair 'mlp' alone need" in result.stderr
    assert "Traceback" not in result.stderr


def test_numpy_integers_count_as_integers(no_work):
    # the checks accept them, so compare() goes on to the work, which no_work refuses
    with pytest.raises(AssertionError, match="started working"):
        harness.compare("mlp", batch_size=np.int64(6), devices=np.int32(2), steps=np.int16(1), seed=np.uint8(3),
                        torch_devices="cpu")


def test_cuda_asked_for_on_a_machine_without_it_says_there_is_no_cuda(no_work):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ComparisonError, match=r"torch_devices='cuda' but there is no CUDA here"):
        harness.compare("mlp", batch_size=4, devices=2, steps=1, torch_devices="cuda")


def _mlp_variant(**changes) -> models.ModelPair:
    return dataclasses.replace(models.get("mlp"), **changes)


def test_a_pair_whose_make_inputs_ignores_batch_size_is_named():
    mlp = models.get("mlp")
    pair = _mlp_variant(name="fixed_rows", make_inputs=lambda batch_size, seed, dtype: mlp.make_inputs(4, seed, dtype))
    with pytest.raises(ComparisonError) as raised:
        harness.compare(pair, batch_size=6, devices=2, strategies=["explicit"], steps=1, torch_devices="cpu")
    message = str(raised.value)
    assert "pair 'fixed_rows': make_inputs(batch_size=6" in message
    assert "inputs[0] with 4 rows on axis 0" in message and "must return batch_size rows" in message


@pytest.mark.parametrize("side", ["loss_torch", "loss_jax"])
def test_a_pair_whose_loss_is_not_a_scalar_is_named(side):
    mlp = models.get("mlp")
    unreduced = {"loss_torch": lambda out, y: (out ** 2).mean(1), "loss_jax": lambda out, y: (out ** 2).mean(1)}
    pair = _mlp_variant(name=f"unreduced_{side}", **{side: unreduced[side]})
    assert getattr(mlp, side) is not getattr(pair, side)
    with pytest.raises(ComparisonError) as raised:
        harness.compare(pair, batch_size=6, devices=2, strategies=["explicit"], steps=1, torch_devices="cpu")
    assert f"pair 'unreduced_{side}': {side}(output, targets) returned shape (6,); return a scalar" in str(raised.value)


def test_default_torch_devices_and_jax_count_match_the_cli_in_a_fresh_process():
    """Without XLA_FLAGS and JAX not started: compare() gets its JAX devices and, with no GPU, virtual torch ones."""
    code = ("import torch; from comparisons import compare\n"
            "r = compare('mlp', batch_size=9, devices=9, strategies=['explicit'], steps=1)\n"
            "print(r.torch_devices, r.ok, torch.cuda.device_count() >= 9)")
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    kind, ok, gpus = done.stdout.split()
    assert ok == "True" and kind == ("cuda" if gpus == "True" else "virtual")


def test_a_started_jax_with_too_few_devices_says_how_to_get_more():
    import jax

    if jax.default_backend() != "cpu":
        pytest.skip("JAX runs on an accelerator here; the test counts the 8 CPU devices conftest sets")
    with pytest.raises(ComparisonError, match=r"devices=12 but JAX has 8 device\(s\) \(cpu\) and has started.*"
                                              r"jax.config.update\('jax_num_cpu_devices', 12\)"):
        harness.compare("mlp", batch_size=12, devices=12, strategies=["explicit"], steps=1, torch_devices="cpu")
    assert len(jax.devices()) == 8
