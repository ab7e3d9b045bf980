"""dp_torch on bad or unusual inputs: no silent wrong answer, and errors that name argument, value and fix."""
from __future__ import annotations

import dataclasses
import re

import pytest
import torch
from _helpers_torch import cpus, mlp
from torch import nn
from torch_oracle import stock  # noqa: F401  (fixture)

import dp_torch


class RaisesIn(nn.Module):
    """Raises ``error`` in the replica that gets the chunk starting at row ``row`` (rows carry their index)."""

    def __init__(self, row: int, error: BaseException) -> None:
        super().__init__()
        self.row, self.error = row, error

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if int(x[0, 0]) == self.row:
            raise self.error
        return x * 2


def rows(batch: int) -> torch.Tensor:
    """Row i starts with i, so a replica knows which chunk it got."""
    return torch.arange(batch, dtype=torch.float32)[:, None].repeat(1, 3)


# --- BaseException in a replica's thread ----------------------------------------------------------


@pytest.mark.parametrize(("row", "replica"), [(0, 0), (6, 3), (2, 1)])
def test_keyboard_interrupt_in_any_replica_reaches_the_caller_as_keyboard_interrupt(row, replica):
    dp = dp_torch.DataParallel(RaisesIn(row, KeyboardInterrupt()), cpus(4))
    with pytest.raises(KeyboardInterrupt) as caught:
        dp(rows(8))  # chunks start at rows 0, 2, 4, 6
    assert f"replica {replica} on device cpu" in "\n".join(getattr(caught.value, "__notes__", []))


def test_system_exit_in_a_replica_keeps_its_exit_code():
    with pytest.raises(SystemExit) as caught:
        dp_torch.DataParallel(RaisesIn(3, SystemExit(3)), cpus(3))(rows(9))
    assert caught.value.code == 3


def test_the_lowest_failing_replica_wins_across_exception_kinds():
    modules = [RaisesIn(0, ValueError("v")), RaisesIn(1, KeyboardInterrupt())]
    with pytest.raises(ValueError, match="Caught ValueError in replica 0 on device cpu"):
        dp_torch.parallel_apply(modules, [rows(1), rows(2)[1:]], devices=cpus(2))


def test_keyboard_interrupt_on_a_single_replica_names_it_too():
    with pytest.raises(KeyboardInterrupt) as caught:
        dp_torch.parallel_apply([RaisesIn(0, KeyboardInterrupt())], [rows(2)], devices=cpus(1))
    assert "replica 0 on device cpu" in "\n".join(caught.value.__notes__)


@pytest.mark.parametrize("error", [ValueError("bad shape"), KeyError("k"), ZeroDivisionError("z")])
def test_a_user_model_error_keeps_its_type_and_names_replica_and_device(error):
    with pytest.raises(type(error), match=rf"Caught {type(error).__name__} in replica 2 on device cpu"):
        dp_torch.DataParallel(RaisesIn(4, error), cpus(3))(rows(6))


# --- replicas that return different things ----------------------------------------------------


class NoneForRow(nn.Module):
    def __init__(self, row: int) -> None:
        super().__init__()
        self.row = row

    def forward(self, x: torch.Tensor) -> torch.Tensor | None:
        return None if int(x[0, 0]) == self.row else x + 1


@pytest.mark.parametrize(("row", "message"), [(0, "out is None in replica 0 but a Tensor in replica 1"),
                                              (4, "out is a Tensor in replica 0 but NoneType in replica 2")])
def test_a_replica_returning_none_beside_tensors_is_an_error_naming_both(row, message):
    with pytest.raises(TypeError, match=message):
        dp_torch.DataParallel(NoneForRow(row), cpus(3))(rows(6))


def test_gather_of_none_beside_tensors_is_refused_where_stock_returns_none(stock):
    parts = [None, torch.randn(2, 3), torch.randn(1, 3)]
    assert stock.gather(parts, 0) is None
    with pytest.raises(TypeError, match=r"gather: out\['y'\] is None in replica 0 but a Tensor in replica 1"):
        dp_torch.gather([{"y": p} for p in parts], "cpu")
    assert dp_torch.gather([None, None], "cpu") is None


@pytest.mark.parametrize("dtypes", [(torch.float32, torch.float64), (torch.float64, torch.float32, torch.float32),
                                    (torch.int64, torch.float32)])
def test_gather_of_outputs_with_different_dtypes_is_an_error_naming_them(dtypes):
    parts = [torch.randn(2, 3).to(dtype) for dtype in dtypes]
    with pytest.raises(TypeError, match=rf"out has dtype {dtypes[1]} in replica 1 but {dtypes[0]} in replica 0"):
        dp_torch.gather(parts, "cpu")


def test_gather_of_mixed_dtypes_raises_where_stock_casts_to_replica_0s_dtype(stock):
    # docs/divergences.md: stock's C++ gather allocates with replica 0's dtype and copies into it.
    parts = [torch.randn(2, 3), torch.randn(1, 3, dtype=torch.float64)]
    theirs = stock.gather(parts, 0)
    assert theirs.dtype == torch.float32
    torch.testing.assert_close(theirs, torch.cat([parts[0], parts[1].float()]))
    with pytest.raises(TypeError, match="every replica must return the same dtype"):
        dp_torch.gather(parts, "cpu")


def test_scalar_outputs_of_different_dtypes_are_refused_too():
    with pytest.raises(TypeError, match="has dtype torch.float64 in replica 1"):
        dp_torch.gather([torch.tensor(1.0), torch.tensor(2.0, dtype=torch.float64)], "cpu")


# --- objects scatter does not look inside ------------------------------------------------------


@dataclasses.dataclass
class Batch:
    x: torch.Tensor
    note: str = "train"


class Holder:
    def __init__(self, images: list[torch.Tensor]) -> None:
        self.images = images


class ReadsBatch(nn.Module):
    def forward(self, batch: Batch, *others: torch.Tensor) -> torch.Tensor:
        return batch.x * 3


def test_a_dataclass_holding_the_batch_is_refused_where_stock_gives_4x_the_rows(stock):
    x = torch.randn(10, 3)
    theirs = stock.DataParallel(ReadsBatch(), device_ids=stock.devices(4))(Batch(x))
    assert theirs.shape == (40, 3)
    with pytest.raises(TypeError, match=r"args\[0\] is a Batch \(a dataclass\) holding .x with 10 rows along dim 0"):
        dp_torch.DataParallel(ReadsBatch(), cpus(4))(Batch(x))


def test_an_object_holding_tensors_of_the_batch_size_beside_a_split_tensor_is_refused():
    x = torch.randn(6, 2)
    with pytest.raises(TypeError, match=r"kwargs\['extra'\] is a Holder holding .images\[1\] with 6 rows along "
                                        r"dim 0.*namedtuple"):
        dp_torch.scatter_kwargs((x,), {"extra": Holder([torch.ones(3), torch.ones(6, 2)])}, cpus(3))


@pytest.mark.parametrize(("batch", "n_devices"), [(7, 1), (1, 3)])
def test_a_dataclass_holding_the_batch_is_fine_when_one_replica_runs(batch, n_devices):
    x = torch.randn(batch, 3)
    out = dp_torch.DataParallel(ReadsBatch(), cpus(n_devices))(Batch(x), x)
    torch.testing.assert_close(out, x * 3)


def test_objects_holding_tensors_of_another_size_are_still_shared_like_pytorch():
    x, table = torch.randn(6, 2), torch.randn(5, 2)
    pieces = dp_torch.scatter((x, Batch(table)), cpus(3))
    assert [p[1].x is table for p in pieces] == [True] * 3


# --- arguments checked when given ------------------------------------------------------------


@pytest.mark.parametrize("dim", ["0", 1.0, None, True])
def test_dim_that_is_not_an_int_is_refused_at_construction(dim):
    with pytest.raises(TypeError, match=rf"DataParallel: dim={dim!r} is not an int; pass the batch dimension"):
        dp_torch.DataParallel(mlp(0), cpus(2), dim=dim)


@pytest.mark.parametrize("call", [
    lambda dim: dp_torch.scatter(torch.ones(4, 2), cpus(2), dim=dim),
    lambda dim: dp_torch.scatter_kwargs((torch.ones(4, 2),), {}, cpus(2), dim=dim),
    lambda dim: dp_torch.gather([torch.ones(2, 2)] * 2, "cpu", dim=dim),
    lambda dim: dp_torch.data_parallel(mlp(0, d_in=2), torch.ones(4, 2), cpus(2), dim=dim),
], ids=["scatter", "scatter_kwargs", "gather", "data_parallel"])
@pytest.mark.parametrize("dim", ["batch", 0.5, None])
def test_dim_that_is_not_an_int_is_refused_by_every_step(call, dim):
    with pytest.raises(TypeError, match=rf"dim={dim!r} is not an int"):
        call(dim)


@pytest.mark.parametrize("dim", [2, -3, 7])
def test_dim_out_of_range_names_dim_the_shape_and_the_valid_range(dim):
    with pytest.raises(IndexError, match=rf"dim={dim} is out of range for leaf args\[0\] of shape \(4, 2\); "
                                         r"pass a dim between -2 and 1"):
        dp_torch.DataParallel(mlp(0, d_in=2), cpus(2), dim=dim)(torch.ones(4, 2))
    with pytest.raises(IndexError, match=r"pass a dim between -2 and 1"):
        dp_torch.gather([torch.ones(2, 2)] * 2, "cpu", dim=dim)


@pytest.mark.parametrize("module", [lambda x: x, torch.relu, "linear", None])
def test_data_parallel_of_something_not_a_module_names_its_type_and_the_fix(module):
    name = type(module).__name__
    with pytest.raises(TypeError, match=rf"DataParallel: module must be a torch.nn.Module, got {name}"):
        dp_torch.DataParallel(module, cpus(2))
    with pytest.raises(TypeError, match=rf"data_parallel: module must be a torch.nn.Module, got {name}"):
        dp_torch.data_parallel(module, torch.ones(2, 2), cpus(2))


# --- devices this machine does not have -------------------------------------------------------


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("device", ["cuda", "cuda:0", torch.device("cuda", 1)])
def test_cuda_on_a_machine_without_it_says_there_is_no_cuda(device):
    with pytest.raises(ValueError, match=re.escape(f"device_ids[0]={device!r} names cuda") +
                       r"(:\d)?, but this machine has no cuda device; pass 'cpu'"):
        dp_torch.DataParallel(mlp(0), [device])


def test_a_virtual_device_name_before_install_says_to_install():
    with pytest.raises(ValueError, match=r"device_ids\[1\]='vdev:0' is not a device name .*"
                                         r"dp_torch\.virtual\.install\(\) first"):
        dp_torch.DataParallel(mlp(0), ["cpu", "vdev:0"])


# --- the meta device: tensors without data can hold no replica --------------------------------

_META_FIX = r"meta tensors have no data.*pass 'cpu' or a real device"


@pytest.mark.parametrize("meta", ["meta", "meta:0", torch.device("meta")])
@pytest.mark.parametrize("position", [0, 1, 2])
def test_a_meta_device_in_device_ids_is_refused_naming_its_position_value_and_the_fix(meta, position):
    device_ids = ["cpu", "cpu", "cpu"]
    device_ids[position] = meta
    name = re.escape(f"device_ids[{position}]={meta!r}")
    with pytest.raises(ValueError, match=name + ".*" + _META_FIX):
        dp_torch.DataParallel(mlp(0), device_ids)
    with pytest.raises(ValueError, match=name + ".*" + _META_FIX):
        dp_torch.data_parallel(mlp(0), torch.ones(4, 2), device_ids)


def test_a_meta_output_device_is_refused_naming_output_device():
    with pytest.raises(ValueError, match=r"output_device='meta'.*" + _META_FIX):
        dp_torch.DataParallel(mlp(0), cpus(2), output_device="meta")


def test_replicate_scatter_gather_and_parallel_apply_refuse_a_meta_device_by_name():
    with pytest.raises(ValueError, match=r"replicate: devices\[1\]='meta'.*" + _META_FIX):
        dp_torch.replicate(mlp(0), ["cpu", "meta"])
    with pytest.raises(ValueError, match=r"scatter: target_devices\[0\]='meta'.*" + _META_FIX):
        dp_torch.scatter(torch.ones(4, 2), ["meta", "cpu"])
    with pytest.raises(ValueError, match=r"scatter_kwargs: target_devices\[2\]='meta'.*" + _META_FIX):
        dp_torch.scatter_kwargs((torch.ones(4, 2),), {}, ["cpu", "cpu", "meta"])
    with pytest.raises(ValueError, match=r"gather: target_device='meta'.*" + _META_FIX):
        dp_torch.gather([torch.ones(2), torch.ones(2)], "meta")
    with pytest.raises(ValueError, match=r"parallel_apply: devices\[1\]='meta'.*" + _META_FIX):
        dp_torch.parallel_apply([mlp(0), mlp(0)], [(torch.ones(1, 2),)] * 2, None, ["cpu", "meta"])
