"""dp_torch.scatter / scatter_kwargs / gather: PyTorch's chunking, rebuild rules and gather dispatch."""
from __future__ import annotations

import collections
import dataclasses
from typing import NamedTuple

import pytest
import torch
from _helpers_torch import cpus
from torch_oracle import stock  # noqa: F401  (fixture)

import dp_torch

Pair = collections.namedtuple("Pair", ["left", "right"])


class Batch(NamedTuple):
    x: torch.Tensor
    label: str


@pytest.mark.parametrize(
    ("batch", "expected_sizes"),
    [(1, [1]), (3, [1, 1, 1]), (5, [2, 2, 1]), (6, [2, 2, 2]), (9, [3, 3, 3]), (10, [3, 3, 3, 1]), (13, [4, 4, 4, 1])],
)
def test_chunk_sizes_on_4_devices_follow_torch_chunk(batch, expected_sizes):
    chunks = dp_torch.scatter(torch.randn(batch, 2), cpus(4))
    assert [c.shape[0] for c in chunks] == expected_sizes


def test_batch_of_0_gives_one_empty_chunk_per_device():
    chunks = dp_torch.scatter(torch.empty(0, 3), cpus(4))
    assert [tuple(c.shape) for c in chunks] == [(0, 3)] * 4


@pytest.mark.parametrize("dim", [1, -1])
def test_scatter_splits_along_dim_including_negative(dim):
    x = torch.randn(2, 7)
    chunks = dp_torch.scatter(x, cpus(3), dim=dim)
    assert [c.shape for c in chunks] == [torch.Size([2, 3]), torch.Size([2, 3]), torch.Size([2, 1])]
    torch.testing.assert_close(torch.cat(chunks, 1), x)


def test_chunk_on_its_own_device_is_a_view_of_the_input():
    x = torch.randn(6, 2)
    chunks = dp_torch.scatter(x, cpus(2))
    assert chunks[1].untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    chunks[0][0, 0] = 42.0  # visible through the input, since nothing was copied
    assert x[0, 0].item() == 42.0


def test_a_bare_tensor_gives_a_tuple_and_containers_give_lists():
    x = torch.randn(4, 1)
    assert isinstance(dp_torch.scatter(x, cpus(2)), tuple)
    assert isinstance(dp_torch.scatter([x], cpus(2)), list)


def test_rebuild_rules_namedtuple_tuple_list_dict_and_shared_leaves():
    x, shared = torch.randn(4, 2), object()
    tuple_subclass = type("MyTuple", (tuple,), {})
    per_device = dp_torch.scatter(
        (Pair(x, x), tuple_subclass([x]), [x, shared], collections.OrderedDict(k=x), "label", None), cpus(2)
    )
    for i, (pair, plain, lst, odict, label, none) in enumerate(per_device):
        rows = x[2 * i : 2 * i + 2]
        assert type(pair) is Pair and torch.equal(pair.left, rows)
        assert type(plain) is tuple  # tuple subclasses lose their type, as in PyTorch
        assert type(lst) is list and lst[1] is shared
        assert type(odict) is collections.OrderedDict and torch.equal(odict["k"], rows)
        assert label == "label" and none is None


def test_dataclass_without_the_batch_is_shared_by_reference_not_split():
    @dataclasses.dataclass
    class Holder:
        x: torch.Tensor

    holder = Holder(torch.randn(3))  # a batch-sized tensor here is refused (test_torch_bad_inputs.py)
    per_device = dp_torch.scatter((torch.randn(4), holder), cpus(2))
    assert all(args[1] is holder for args in per_device)


def test_scatter_of_leaves_with_different_batch_sizes_is_an_error_naming_both_paths():
    with pytest.raises(ValueError, match=r"leaf inputs\[1\]\['mask'\] has batch 8 but inputs\[0\] has 5"):
        dp_torch.scatter((torch.randn(5, 2), {"mask": torch.ones(8)}), cpus(4))


def test_scatter_of_a_0dim_tensor_is_an_error_naming_the_leaf():
    with pytest.raises(RuntimeError, match=r"leaf inputs\[0\] is a 0-dim tensor"):
        dp_torch.scatter((torch.tensor(1.0),), cpus(2))


def test_scatter_with_dim_out_of_range_names_dim_and_shape():
    with pytest.raises(IndexError, match=r"dim=2 is out of range for leaf inputs of shape \(3, 2\)"):
        dp_torch.scatter(torch.randn(3, 2), cpus(2), dim=2)


def test_scatter_to_no_devices_is_an_error():
    with pytest.raises(ValueError, match="target_devices is empty"):
        dp_torch.scatter(torch.randn(3), [])


def test_scatter_backward_sums_chunk_gradients_into_the_input():
    x = torch.randn(5, 3, requires_grad=True)
    weights = torch.randn(5, 3)
    chunks = dp_torch.scatter(x, cpus(3))
    sum(((c * w).sum() for c, w in zip(chunks, weights.split(2))), torch.tensor(0.0)).backward()
    torch.testing.assert_close(x.grad, weights)


def test_scatter_kwargs_splits_args_and_kwargs_together():
    x, mask = torch.randn(6, 2), torch.randn(6)
    args, kwargs = dp_torch.scatter_kwargs((x,), {"mask": mask, "scale": 2.0}, cpus(3))
    assert len(args) == len(kwargs) == 3
    for i in range(3):
        assert torch.equal(args[i][0], x[2 * i : 2 * i + 2]) and kwargs[i]["scale"] == 2.0


def test_scatter_kwargs_non_tensor_kwargs_force_extra_replicas_without_args():
    # PyTorch's Quirk A, kept: a batch of 2 on 4 devices still makes 4 kwargs, so args are padded with ().
    args, kwargs = dp_torch.scatter_kwargs((torch.randn(2, 3),), {"scale": 2.0}, cpus(4))
    assert [len(a) for a in args] == [1, 1, 0, 0]
    assert len(kwargs) == 4


def test_scatter_kwargs_pads_missing_kwargs_with_empty_dicts():
    args, kwargs = dp_torch.scatter_kwargs((torch.randn(4, 1),), None, cpus(2))
    assert len(args) == 2 and kwargs == ({}, {})


def test_scatter_kwargs_with_args_and_kwargs_of_different_batch_is_an_error():
    # PyTorch's Quirk B (batch 8 args, batch 2 kwargs) ends in an AssertionError deep in parallel_apply.
    with pytest.raises(ValueError, match=r"leaf kwargs\['mask'\] has batch 2 but args\[0\] has 8"):
        dp_torch.scatter_kwargs((torch.randn(8, 2),), {"mask": torch.ones(2)}, cpus(4))


def test_scatter_kwargs_with_fewer_kwarg_chunks_than_non_tensor_args_is_an_error():
    with pytest.raises(ValueError, match="kwargs split into 2 pieces"):
        dp_torch.scatter_kwargs(("mode",), {"x": torch.randn(2, 1)}, cpus(4))


def test_scatter_never_modifies_user_inputs():
    x = torch.randn(6, 2)
    inputs = ([x], {"m": x})
    before = x.clone()
    dp_torch.scatter_kwargs(inputs, {"k": x}, cpus(3))
    assert inputs == ([x], {"m": x}) and torch.equal(x, before)


def test_gather_concatenates_on_the_target_device_and_backward_splits():
    parts = [torch.randn(n, 2, requires_grad=True) for n in (3, 3, 1)]
    out = dp_torch.gather(parts, "cpu")
    torch.testing.assert_close(out, torch.cat([p.detach() for p in parts]))
    weights = torch.randn(7, 2)
    (out * weights).sum().backward()
    for p, w in zip(parts, weights.split([3, 3, 1])):
        torch.testing.assert_close(p.grad, w)


UNEVEN_PIECES = [(1, 3), (3, 1), (1, 1, 4), (5, 2, 1), (2, 0, 3), (1, 6)]  # none are torch.chunk's sizes


def _pieces(sizes: tuple[int, ...], dim: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(sum(s * 10**i for i, s in enumerate(sizes)) + dim)
    shapes = [(n, 3) if dim == 0 else (2, n) for n in sizes]
    return [torch.randn(shape, generator=generator).requires_grad_() for shape in shapes]


@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("sizes", UNEVEN_PIECES, ids=str)
def test_gather_backward_gives_each_uneven_piece_its_own_rows(sizes, dim):
    pieces = _pieces(sizes, dim)
    reference = [p.detach().clone().requires_grad_() for p in pieces]
    out = dp_torch.gather(pieces, "cpu", dim=dim)
    expected = torch.cat(reference, dim)
    weights = torch.randn(expected.shape, generator=torch.Generator().manual_seed(len(sizes)))
    (out * weights).pow(2).sum().backward()
    (expected * weights).pow(2).sum().backward()
    for piece, single_device in zip(pieces, reference):
        assert piece.grad.shape == piece.shape
        torch.testing.assert_close(piece.grad, single_device.grad)


@pytest.mark.parametrize("sizes", UNEVEN_PIECES[:4], ids=str)
def test_gather_backward_of_uneven_pieces_matches_stock(sizes, stock):
    ours, theirs = _pieces(sizes, 0), _pieces(sizes, 0)
    weights = torch.randn(sum(sizes), 3)
    (dp_torch.gather(ours, "cpu") * weights).sum().backward()
    (stock.gather(theirs, 0) * weights).sum().backward()
    for mine, stocks in zip(ours, theirs):
        torch.testing.assert_close(mine.grad, stocks.grad)


@pytest.mark.parametrize("target", ["cpu", torch.device("cpu"), None])
def test_gather_accepts_cpu_spellings(target):
    assert dp_torch.gather([torch.ones(1), torch.zeros(1)], target).device.type == "cpu"


def test_gather_to_minus_one_means_cpu_with_pytorchs_future_warning():
    with pytest.warns(FutureWarning, match="Using -1 to represent CPU tensor is deprecated"):
        assert dp_torch.gather([torch.ones(2)], -1).device == torch.device("cpu")


def test_gather_of_scalars_along_dim_0_warns_and_returns_one_entry_per_replica():
    losses = [torch.tensor(float(i), requires_grad=True) for i in range(3)]
    with pytest.warns(UserWarning, match="all input tensors were scalars; will instead unsqueeze"):
        out = dp_torch.gather(losses, "cpu")
    assert out.shape == (3,)
    out.sum().backward()
    assert [loss.grad.shape for loss in losses] == [torch.Size([])] * 3


def test_gather_structures_follow_replica_0():
    a = {"logits": torch.ones(2, 3), "aux": (torch.ones(2), None), "pair": Pair(torch.ones(1), [torch.ones(1)])}
    out = dp_torch.gather([a, a], "cpu")
    assert out["logits"].shape == (4, 3) and out["aux"][1] is None and type(out["pair"]) is Pair
    assert type(out["pair"].right) is list and out["pair"].right[0].shape == (2,)


def test_gather_of_dicts_with_different_key_counts_uses_pytorchs_message():
    with pytest.raises(ValueError, match="All dicts must have the same number of keys"):
        dp_torch.gather([{"a": torch.ones(1)}, {"a": torch.ones(1), "b": torch.ones(1)}], "cpu")


def test_gather_of_dicts_with_different_keys_is_a_key_error_naming_the_key():
    with pytest.raises(KeyError, match="lacks key 'a'"):
        dp_torch.gather([{"a": torch.ones(1)}, {"b": torch.ones(1)}], "cpu")


def test_gather_of_different_ranks_names_the_path_and_shapes():
    with pytest.raises(RuntimeError, match=r"out\['y'\] has shape \(2,\) in replica 1 but \(2, 3\) in replica 0"):
        dp_torch.gather([{"y": torch.ones(2, 3)}, {"y": torch.ones(2)}], "cpu")


def test_gather_of_mismatched_non_concat_dims_names_the_path_and_shapes():
    with pytest.raises(RuntimeError, match=r"out\[0\] has shape \(1, 4\) in replica 1 but \(1, 3\) in replica 0"):
        dp_torch.gather([(torch.ones(1, 3),), (torch.ones(1, 4),)], "cpu")


def test_gather_of_tuples_with_different_lengths_is_an_error():
    with pytest.raises(ValueError, match="has length 1 in replica 1 but 2 in replica 0"):
        dp_torch.gather([(torch.ones(1), torch.ones(1)), (torch.ones(1),)], "cpu")


@pytest.mark.parametrize("value", ["text", 3, 2.5, True])
def test_gather_of_non_tensor_leaves_is_a_type_error(value):
    # PyTorch turns a str into '<map object ...>' and fails on numbers with "'int' object is not iterable".
    with pytest.raises(TypeError, match=f"gather: out\\[1\\] is an? {type(value).__name__}"):
        dp_torch.gather([(torch.ones(1), value), (torch.ones(1), value)], "cpu")


def test_gather_of_a_dataclass_is_a_type_error():
    @dataclasses.dataclass
    class Output:
        logits: torch.Tensor

    with pytest.raises(TypeError, match="gather: out is an Output"):
        dp_torch.gather([Output(torch.ones(1)), Output(torch.ones(1))], "cpu")


def test_gather_when_every_replica_returns_none_returns_none():
    assert dp_torch.gather([None, None, None], "cpu") is None


def test_gather_of_nothing_is_an_error():
    with pytest.raises(ValueError, match="outputs is empty"):
        dp_torch.gather([], "cpu")


@pytest.mark.parametrize(
    ("outputs", "dim"), [((torch.tensor(1.0), torch.tensor(2.0)), -1), ((torch.ones(1), torch.tensor(2.0)), 0)]
)
def test_gather_of_scalars_other_than_all_along_dim_0_is_an_index_error(outputs, dim):
    with pytest.raises(IndexError, match=r"gather: out is 0-dim in replica \d and cannot be concatenated"):
        dp_torch.gather(list(outputs), "cpu", dim=dim)
