"""Where dp_torch deliberately differs from PyTorch: each test shows stock's behaviour (through the
CPU oracle) AND dp_torch's clear error, so a divergence can never pass as agreement."""
import warnings
from dataclasses import dataclass
from unittest import mock

import pytest
import torch
import torch_oracle
from torch import nn
from torch_oracle import stock  # noqa: F401  (pytest fixture)

import dp_torch


@dataclass
class ModelOutput:
    logits: torch.Tensor


class Returns(nn.Module):
    """Returns a fixed non-tensor value next to nothing else (per replica)."""

    def __init__(self, value) -> None:
        super().__init__()
        self.value = value

    def forward(self, x):
        return self.value if not callable(self.value) else self.value(x)


def test_str_output_is_gathered_into_a_map_object_by_stock_and_rejected_by_dp_torch(stock):
    x = torch.randn(4, 2)
    gathered = stock.DataParallel(Returns("label"), device_ids=[0, 1])(x)
    assert gathered.startswith("<map object at ")  # pytorch#62466
    with pytest.raises(TypeError, match=r"gather: out is a str \('label'\)"):
        dp_torch.DataParallel(Returns("label"), device_ids=["cpu"] * 2)(x)


@pytest.mark.parametrize("value", [3, 2.5, True, ModelOutput(torch.ones(2))],
                         ids=["int", "float", "bool", "dataclass"])
def test_non_container_outputs_fail_obscurely_in_stock_and_clearly_in_dp_torch(stock, value):
    name = type(value).__name__
    with pytest.raises(TypeError, match=f"^'{name}' object is not iterable$"):
        stock.gather([value, value], 0)
    with pytest.raises(TypeError, match=f"gather: out is an? {name} .*gather only joins tensors"):
        dp_torch.gather([value, value], "cpu")


def test_leaves_of_different_batch_are_truncated_by_stock_and_rejected_by_dp_torch(stock):
    x, y = torch.randn(5, 2), torch.randn(8, 2)
    chunks = stock.scatter((x, y), [0, 1, 2, 3])
    assert len(chunks) == 3  # y's 4th chunk (rows 6..7) silently dropped
    assert sum(c[1].shape[0] for c in chunks) == 6
    with pytest.raises(ValueError, match=r"leaf inputs\[1\] has batch 8 but inputs\[0\] has 5"):
        dp_torch.scatter((x, y), ["cpu"] * 4)


def test_dataparallel_with_truncating_inputs_runs_3_replicas_in_stock_and_raises_in_dp_torch(stock):
    class Both(nn.Module):
        def forward(self, x, y):
            return x.sum(1, keepdim=True) + y.sum(1, keepdim=True)[: len(x)]

    x, y = torch.randn(5, 2), torch.randn(8, 2)
    assert stock.DataParallel(Both(), device_ids=[0, 1, 2, 3])(x, y).shape == (5, 1)
    with pytest.raises(ValueError, match=r"has batch 8 but .* has 5"):
        dp_torch.DataParallel(Both(), device_ids=["cpu"] * 4)(x, y)


def test_no_tensor_input_error_is_broken_in_stock_and_clear_in_dp_torch(stock):
    modules, inputs = [Returns(1.0), Returns(2.0)], [("no tensor",), ("no tensor",)]
    # Reach stock's `device is None` branch: device resolution that gives None (no accelerator).
    unresolved = mock.patch.object(torch_oracle.stock_parallel_apply, "_get_device_index",
                                   lambda device, optional=False, allow_cpu=False: device)
    with unresolved, pytest.raises(AttributeError, match="'NoneType' object has no attribute '__name__'"):
        stock.parallel_apply(modules, inputs)
    with pytest.raises(ValueError, match=r"devices\[0\] is None and replica 0 has no parameters"):
        dp_torch.parallel_apply(modules, inputs)


def test_quirk_b_kwargs_batch_mismatch_fails_late_in_stock_and_early_in_dp_torch(stock):
    class WithMask(nn.Module):
        def forward(self, x, mask):
            return x * mask[:1].sum()

    x, mask = torch.randn(8, 2), torch.randn(2, 1)
    with pytest.raises(AssertionError, match="number of modules 4 is not equal to the number of kwargs_tup 2"):
        stock.DataParallel(WithMask(), device_ids=[0, 1, 2, 3])(x, mask=mask)
    with pytest.raises(ValueError, match=r"leaf kwargs\['mask'\] has batch 2 but args\[0\] has 8"):
        dp_torch.DataParallel(WithMask(), device_ids=["cpu"] * 4)(x, mask=mask)


def test_cpu_autocast_dtype_is_lost_in_stock_workers_and_kept_by_dp_torch(stock):
    lin = nn.Linear(4, 4)
    inputs = [torch.randn(2, 4), torch.randn(2, 4)]
    with torch.autocast("cpu", dtype=torch.float16):
        theirs = stock.parallel_apply([lin, lin], inputs, None, [0, 1])
        ours = dp_torch.parallel_apply([lin, lin], inputs, None, ["cpu"] * 2)
    # Stock passes only the enabled flag; the worker thread gets the default CPU autocast dtype.
    assert [t.dtype for t in theirs] == [torch.get_autocast_dtype("cpu")] * 2 == [torch.bfloat16] * 2
    assert [t.dtype for t in ours] == [torch.float16] * 2


def test_gather_to_a_cpu_device_object_is_refused_by_stock_and_accepted_by_dp_torch(stock):
    parts = [torch.ones(1, 2), torch.zeros(1, 2)]
    with pytest.raises(ValueError, match="Expected a non cpu device, but got: cpu"):
        stock.gather(parts, torch.device("cpu"))
    assert dp_torch.gather(parts, torch.device("cpu")).tolist() == [[1.0, 1.0], [0.0, 0.0]]


def test_a_replica_returning_none_breaks_stock_gather_and_is_named_by_dp_torch(stock):
    outputs = [torch.ones(2), None]
    with pytest.raises(AttributeError, match="'NoneType' object has no attribute"):
        stock.gather(outputs, 0)
    with pytest.raises(TypeError, match=r"out is a Tensor in replica 0 but NoneType in replica 1"):
        dp_torch.gather(outputs, "cpu")


@pytest.mark.parametrize("empty", ["gather", "parallel_apply", "device_ids"])
def test_empty_arguments_are_index_errors_in_stock_and_named_value_errors_in_dp_torch(stock, empty):
    calls = {
        "gather": (lambda: stock.gather([], 0), lambda: dp_torch.gather([], "cpu"), "outputs is empty"),
        "parallel_apply": (lambda: stock.parallel_apply([], []), lambda: dp_torch.parallel_apply([], []),
                           "modules is empty"),
        "device_ids": (lambda: stock.DataParallel(nn.Linear(1, 1), device_ids=[]),
                       lambda: dp_torch.DataParallel(nn.Linear(1, 1), device_ids=[]), "device_ids is empty"),
    }
    theirs, ours, message = calls[empty]
    with pytest.raises(IndexError, match="list index out of range"):
        theirs()
    with pytest.raises(ValueError, match=message):
        ours()


def test_quirk_b_with_3_args_silently_drops_kwargs_in_stock_and_raises_in_dp_torch(stock):
    class MaybeMasked(nn.Module):
        def forward(self, x, y, z, mask=None):
            return x + y + z if mask is None else (x + y + z) * 0

    x = torch.ones(8, 1)
    mask = torch.ones(2, 1)
    out = stock.DataParallel(MaybeMasked(), device_ids=[0, 1, 2, 3])(x, x, x, mask=mask)
    assert out[:4].sum() == 0 and out[4:].sum() == 12  # replicas 2 and 3 never saw the mask
    with pytest.raises(ValueError, match=r"kwargs\['mask'\] has batch 2 but args\[0\] has 8"):
        dp_torch.DataParallel(MaybeMasked(), device_ids=["cpu"] * 4)(x, x, x, mask=mask)


def test_inference_mode_is_lost_in_stock_workers_and_kept_by_dp_torch(stock):
    model = nn.BatchNorm1d(2).train()
    x = torch.randn(6, 2)
    with torch.inference_mode():
        with pytest.raises(RuntimeError, match="Inplace update to inference tensor outside InferenceMode"):
            stock.DataParallel(model, device_ids=[0, 1])(x)
        assert dp_torch.DataParallel(model, device_ids=["cpu"] * 2)(x).shape == (6, 2)


def test_output_device_minus_one_warns_on_every_forward_in_stock_and_once_normalised_in_dp_torch(stock):
    x = torch.randn(4, 3)
    theirs = stock.DataParallel(nn.Linear(3, 1), device_ids=[0, 1], output_device=-1)
    with pytest.warns(FutureWarning, match="Using -1 to represent CPU tensor is deprecated"):
        theirs(x)
    ours = dp_torch.DataParallel(nn.Linear(3, 1), device_ids=["cpu"] * 2, output_device=-1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ours(x).shape == (4, 1)


def test_device_ids_are_ints_in_stock_and_torch_devices_in_dp_torch(stock):
    theirs = stock.DataParallel(nn.Linear(1, 1), device_ids=[0, 1])
    ours = dp_torch.DataParallel(nn.Linear(1, 1), device_ids=["cpu", "cpu"])
    assert (theirs.device_ids, theirs.output_device) == ([0, 1], 0)
    assert (ours.device_ids, ours.output_device) == ([torch.device("cpu")] * 2, torch.device("cpu"))


def test_failure_text_names_the_current_device_in_stock_and_the_replicas_device_in_dp_torch(stock):
    inputs = [torch.tensor([float(i)]) for i in range(3)]
    modules = [_FailsFrom(2)] * 3
    # devices=None: stock resolves every replica to the *current* device (0), dp_torch to its tensors'.
    with pytest.raises(ValueError, match=r"^Caught ValueError in replica 2 on device 0\.\n"):
        stock.parallel_apply(modules, inputs)
    with pytest.raises(ValueError, match=r"^Caught ValueError in replica 2 on device cpu\.\n"):
        dp_torch.parallel_apply(modules, inputs)


class _FailsFrom(nn.Module):
    def __init__(self, first_bad: int) -> None:
        super().__init__()
        self.first_bad = first_bad

    def forward(self, x):
        if int(x[0]) >= self.first_bad:
            raise ValueError("bad replica")
        return x


def test_quirk_b_with_only_non_tensor_args_fails_late_in_stock_and_early_in_dp_torch(stock):
    kwargs = {"x": torch.randn(2, 1)}
    with pytest.raises(AssertionError, match="number of kwargs_tup 2"):
        stock.DataParallel(Returns(1.0), device_ids=[0, 1, 2, 3])("tag", **kwargs)
    with pytest.raises(ValueError, match="tensors in kwargs split into 2 pieces"):
        dp_torch.DataParallel(Returns(1.0), device_ids=["cpu"] * 4)("tag", **kwargs)
