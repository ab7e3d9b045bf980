"""convert.channels_last_inputs: an image pair's NCHW inputs in Flax's NHWC, the one implementation."""
from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from comparisons.convert import channels_last_inputs

SHAPES = st.tuples(*(st.integers(1, 5) for _ in range(4)))


@given(st.lists(SHAPES, min_size=1, max_size=3), st.integers(0, 2**32 - 1))
def test_each_input_puts_channels_last_element_for_element(shapes, seed):
    rng = np.random.default_rng(seed)
    inputs = tuple(rng.standard_normal(shape).astype(np.float32) for shape in shapes)
    moved = channels_last_inputs(inputs)
    assert isinstance(moved, tuple) and len(moved) == len(inputs)
    for x, y in zip(inputs, moved):
        n, c, h, w = x.shape
        assert y.shape == (n, h, w, c)
        for index in np.ndindex(x.shape):  # element (n, c, h, w) of torch's is (n, h, w, c) of Flax's
            i, k, r, s = index
            assert y[i, r, s, k] == x[index]
