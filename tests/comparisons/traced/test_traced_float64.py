"""A traced pair in float64 runs its JAX side in float64: the model against its own trace passes, never `port`
with float32 leaves on the JAX side (issue 36)."""
from __future__ import annotations

import _traced_nets as nets
from hypothesis import given, settings
from hypothesis import strategies as st

from comparisons import compare
from comparisons.traced import pair_from_torch


@settings(max_examples=1, deadline=None)
@given(seed=st.integers(0, 2**16), batch=st.integers(4, 7))
def test_a_traced_pair_in_float64_passes_against_its_own_trace(seed, batch):
    pair = pair_from_torch(nets.conv_bn, make_inputs=nets.images, loss_torch=nets.mse)
    report = compare(pair, batch_size=batch, devices=2, strategies=["explicit"], steps=1, dtype="float64",
                     torch_devices="cpu", seed=seed)
    assert report.ok, [f"{check.subject}: {check.detail}" for check in report.failures]
    assert report.dtype == "float64"
