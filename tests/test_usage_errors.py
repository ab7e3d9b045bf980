"""Every refusal of user input is its backend's UsageError (a ValueError; UsageTypeError is also a TypeError).

Draws varied bad inputs per backend; the messages themselves are specified by each step's own tests.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import dp_jax
import dp_torch
from dp_torch.parallel_apply import LengthMismatchError


def _linear(variables, x):
    return x @ variables["w"]


def _jax_batch(data, rows):
    return data.draw(st.integers(1, 4)), np.ones((rows, 3), np.float32)


# each case: draw -> (a call that must raise, the TypeError flavour expected)
JAX_CASES = {
    "unknown strategy": lambda d: (lambda: dp_jax.DataParallel(_linear, strategy=d.draw(st.text(max_size=8).filter(
        lambda s: s not in dp_jax.STRATEGIES))), False),
    "dim not an int": lambda d: (lambda: dp_jax.DataParallel(_linear, dim=d.draw(st.sampled_from(
        [1.5, "0", True, None]))), True),
    "no devices": lambda d: (lambda: dp_jax.DataParallel(_linear, device_ids=[]), False),
    "device index out of range": lambda d: (lambda: dp_jax.DataParallel(_linear, device_ids=[d.draw(st.integers(
        8, 99))]), False),
    "unknown uneven mode": lambda d: (lambda: dp_jax.DataParallel(_linear, strategy="pmap", uneven=d.draw(
        st.sampled_from(["padded", "", "EXACT"]))), False),
    "not callable": lambda d: (lambda: dp_jax.DataParallel(d.draw(st.sampled_from([3, "model", None]))), True),
    "axis_name with explicit": lambda d: (lambda: dp_jax.DataParallel(_linear, axis_name=d.draw(st.sampled_from(
        ["batch", "i"]))), False),
    "batches that differ": lambda d: (lambda: dp_jax.DataParallel(_linear, [0, 1], strategy=d.draw(st.sampled_from(
        dp_jax.STRATEGIES))).apply({"w": np.ones((3, 2), np.float32)}, np.ones((d.draw(st.integers(2, 6)), 3)),
                                     np.ones(7)), False),
    "rngs not a dict": lambda d: (lambda: dp_jax.DataParallel(_linear, [0, 1]).apply(
        {"w": np.ones((3, 2), np.float32)}, np.ones((4, 3), np.float32), rngs=[1, 2]), True),
    "gather of nothing": lambda d: (lambda: dp_jax.gather([], 0), False),
}


class _Doubler(nn.Module):
    def forward(self, x):
        return 2 * x


TORCH_CASES = {
    "no devices": lambda d: (lambda: dp_torch.DataParallel(_Doubler(), device_ids=[]), False),
    "not a module": lambda d: (lambda: dp_torch.DataParallel(d.draw(st.sampled_from([len, 3, "m"])), ["cpu"]), True),
    "dim not an int": lambda d: (lambda: dp_torch.scatter(torch.ones(4, 2), ["cpu"] * 2, dim=d.draw(
        st.sampled_from([1.5, "0", True]))), True),
    "not a device name": lambda d: (lambda: dp_torch.scatter(torch.ones(4), [d.draw(st.sampled_from(
        ["gpu0", "nodevice:0", "cpu:x"]))]), False),
    "devices not a list": lambda d: (lambda: dp_torch.DataParallel(_Doubler(), device_ids="cpu"), True),
    "batches that differ": lambda d: (lambda: dp_torch.scatter((torch.ones(d.draw(st.integers(2, 6)), 2),
                                                                torch.ones(7, 2)), ["cpu"] * 2), False),
    "gather of nothing": lambda d: (lambda: dp_torch.gather([], "cpu"), False),
    "parallel_apply of nothing": lambda d: (lambda: dp_torch.parallel_apply([], []), False),
}


def _raises_usage(call, usage_error, type_flavour):
    with pytest.raises(usage_error) as caught:
        call()
    assert isinstance(caught.value, ValueError)
    assert isinstance(caught.value, TypeError) == type_flavour, caught.value
    return caught.value


@settings(max_examples=30, deadline=None)
@given(name=st.sampled_from(sorted(JAX_CASES)), data=st.data())
def test_dp_jax_refusals_are_usage_errors(name, data):
    call, type_flavour = JAX_CASES[name](data)
    _raises_usage(call, dp_jax.UsageError, type_flavour)


@settings(max_examples=30, deadline=None)
@given(name=st.sampled_from(sorted(TORCH_CASES)), data=st.data())
def test_dp_torch_refusals_are_usage_errors(name, data):
    call, type_flavour = TORCH_CASES[name](data)
    _raises_usage(call, dp_torch.UsageError, type_flavour)


def test_a_length_mismatch_is_torch_s_assertion_and_a_usage_error():
    with pytest.raises(LengthMismatchError) as caught:
        dp_torch.parallel_apply([_Doubler()] * 3, [torch.ones(1)] * 2, None, ["cpu"] * 3)
    assert isinstance(caught.value, AssertionError) and isinstance(caught.value, dp_torch.UsageError)


def test_the_two_backends_keep_their_own_classes():
    assert dp_jax.UsageError is not dp_torch.UsageError
    for backend in (dp_jax, dp_torch):
        assert issubclass(backend.UsageTypeError, backend.UsageError)
        assert issubclass(backend.UsageTypeError, TypeError)
        assert {"UsageError", "UsageTypeError"} <= set(backend.__all__)
