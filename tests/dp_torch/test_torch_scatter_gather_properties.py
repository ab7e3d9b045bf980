"""Property: gather(scatter(x)) == x for random nested inputs; chunk sizes equal torch.chunk's."""
from __future__ import annotations

import collections

import torch
from _helpers_torch import cpus
from hypothesis import given, settings
from hypothesis import strategies as st

import dp_torch

Point = collections.namedtuple("Point", ["a", "b"])
SHARED = "shared-leaf"


def _structures(tensor: st.SearchStrategy) -> st.SearchStrategy:
    leaves = tensor | st.just(SHARED) | st.none()
    return st.recursive(
        leaves,
        lambda inner: st.tuples(inner, inner)
        | st.lists(inner, min_size=1, max_size=3)
        | st.dictionaries(st.sampled_from("xyz"), inner, min_size=1)
        | st.builds(Point, inner, inner),
        max_leaves=6,
    )


@st.composite
def scatter_cases(draw):
    batch = draw(st.integers(1, 40))
    n_devices = draw(st.integers(1, 8))
    rank = draw(st.integers(1, 3))
    dim = draw(st.integers(-rank, rank - 1))
    seed = draw(st.integers(0, 2**16))
    generator = torch.Generator().manual_seed(seed)

    def make_tensor(extra: int) -> torch.Tensor:
        shape = [2 + extra] * rank
        shape[dim] = batch
        return torch.randn(shape, generator=generator)

    tensors = st.integers(0, 2).map(make_tensor)
    # At least one tensor, so scatter's result has torch.chunk's length.
    return draw(st.tuples(tensors, _structures(tensors))), n_devices, dim, batch


def _assert_same(actual, expected):
    if isinstance(expected, torch.Tensor):
        assert torch.equal(actual, expected)
    elif isinstance(expected, dict):
        assert list(actual) == list(expected)
        for key in expected:
            _assert_same(actual[key], expected[key])
    elif isinstance(expected, (list, tuple)):
        assert type(actual) is (tuple if type(expected) is tuple else type(expected)) and len(actual) == len(expected)
        for a, e in zip(actual, expected):
            _assert_same(a, e)
    else:
        assert actual is expected


@settings(max_examples=40, deadline=None)
@given(scatter_cases())
def test_gather_of_scatter_is_the_identity_with_torch_chunk_sizes(case):
    inputs, n_devices, dim, batch = case
    per_device = dp_torch.scatter(inputs, cpus(n_devices), dim)
    expected_sizes = [c.shape[0] for c in torch.empty(batch).chunk(n_devices)]
    assert [args[0].shape[dim] for args in per_device] == expected_sizes
    if all(isinstance(x, torch.Tensor) or x is None for x in _leaves(inputs)):
        _assert_same(dp_torch.gather(per_device, "cpu", dim), inputs)
    else:  # shared non-tensor leaves are the same object in every piece
        assert all(leaf is SHARED for piece in per_device for leaf in _leaves(piece) if isinstance(leaf, str))


def _leaves(obj):
    if isinstance(obj, dict):
        obj = list(obj.values())
    if isinstance(obj, (list, tuple)):
        return [leaf for item in obj for leaf in _leaves(item)]
    return [obj]
