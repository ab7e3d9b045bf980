"""dp_torch.parallel_apply: threads, propagated thread state, length checks, exception wrapping."""
from __future__ import annotations

import threading

import pytest
import torch
from _helpers_torch import cpus, mlp
from torch import nn
from torch_oracle import stock  # noqa: F401  (fixture)

import dp_torch


class Probe(nn.Module):
    """Records the thread state it runs under, and returns its input."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[dict] = []

    def forward(self, *args, **kwargs):
        self.seen.append(
            {
                "thread": threading.get_ident(),
                "grad": torch.is_grad_enabled(),
                "autocast": torch.is_autocast_enabled("cpu"),
                "dtype": torch.get_autocast_dtype("cpu"),
                "cache": torch.is_autocast_cache_enabled(),
                "args": args,
                "kwargs": kwargs,
            }
        )
        return args[0] if args else None


class Fails(nn.Module):
    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    def forward(self, x):
        raise self.error


def test_outputs_come_back_in_replica_order():
    nets = [mlp(seed) for seed in range(3)]
    inputs = [torch.randn(2, 5) for _ in nets]
    outputs = dp_torch.parallel_apply(nets, inputs, devices=cpus(3))
    for net, x, out in zip(nets, inputs, outputs):
        torch.testing.assert_close(out, net(x))


def test_several_replicas_run_in_threads_and_one_runs_inline():
    probes = [Probe(), Probe()]
    dp_torch.parallel_apply(probes, [torch.ones(1), torch.ones(1)], devices=cpus(2))
    assert all(p.seen[0]["thread"] != threading.get_ident() for p in probes)
    single = Probe()
    dp_torch.parallel_apply([single], [torch.ones(1)], devices=cpus(1))
    assert single.seen[0]["thread"] == threading.get_ident()


def test_list_inputs_are_unpacked_and_others_passed_whole():
    probes = [Probe(), Probe()]
    d = {"k": torch.ones(1)}
    dp_torch.parallel_apply(probes, [(torch.ones(1), 2), d], [{"a": 1}, {}], cpus(2))
    assert probes[0].seen[0]["args"][1] == 2 and probes[0].seen[0]["kwargs"] == {"a": 1}
    assert probes[1].seen[0]["args"] == (d,)


@pytest.mark.parametrize("grad_enabled", [True, False])
def test_grad_mode_reaches_the_worker_threads(grad_enabled):
    probes = [Probe(), Probe()]
    with torch.set_grad_enabled(grad_enabled):
        dp_torch.parallel_apply(probes, [torch.ones(1)] * 2, devices=cpus(2))
    assert [p.seen[0]["grad"] for p in probes] == [grad_enabled] * 2


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_enabled_flag_and_dtype_reach_the_worker_threads(dtype):
    probes = [Probe(), Probe()]
    with torch.autocast("cpu", dtype=dtype):
        dp_torch.parallel_apply(probes, [torch.ones(1)] * 2, devices=cpus(2))
    assert [(p.seen[0]["autocast"], p.seen[0]["dtype"]) for p in probes] == [(True, dtype)] * 2


@pytest.mark.parametrize("cache_enabled", [False, True])
def test_autocast_cache_flag_reaches_the_worker_threads(cache_enabled):
    probes = [Probe(), Probe(), Probe()]
    with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=cache_enabled):
        dp_torch.parallel_apply(probes, [torch.ones(1)] * 3, devices=cpus(3))
    assert [p.seen[0]["cache"] for p in probes] == [cache_enabled] * 3
    assert all(p.seen[0]["thread"] != threading.get_ident() for p in probes)


def test_autocast_cache_flag_is_reset_in_stock_workers_and_kept_by_dp_torch(stock):
    # Divergence 12 in docs/divergences.md: stock re-enters autocast with only the enabled flag.
    ours, theirs = [Probe(), Probe()], [Probe(), Probe()]
    with torch.autocast("cpu", cache_enabled=False):
        dp_torch.parallel_apply(ours, [torch.ones(1)] * 2, devices=cpus(2))
        stock.parallel_apply(theirs, [torch.ones(1)] * 2, None, stock.devices(2))
    assert [p.seen[0]["cache"] for p in theirs] == [True, True]
    assert [p.seen[0]["cache"] for p in ours] == [False, False]


def test_autocast_bf16_matmuls_in_threads_produce_bf16():
    nets = [nn.Linear(4, 4), nn.Linear(4, 4)]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        outputs = dp_torch.parallel_apply(nets, [torch.randn(2, 4)] * 2, devices=cpus(2))
    assert [o.dtype for o in outputs] == [torch.bfloat16] * 2


def test_devices_none_takes_the_device_of_parameters_or_inputs():
    outputs = dp_torch.parallel_apply([nn.Identity(), mlp(0)], [torch.ones(1, 5), torch.ones(1, 5)])
    assert len(outputs) == 2


def test_devices_none_without_any_tensor_is_a_clear_error():
    with pytest.raises(ValueError, match=r"replica 0 has no parameters, buffers or tensor inputs"):
        dp_torch.parallel_apply([nn.Identity()], [("no tensors",)])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"inputs": [1]}, "number of inputs 1"),
        ({"inputs": [1, 2], "kwargs_tup": [{}]}, "number of kwargs_tup 1"),
        ({"inputs": [1, 2], "devices": cpus(3)}, "number of devices 3"),
    ],
)
def test_length_mismatch_is_an_assertion_error_with_pytorchs_text(kwargs, message):
    with pytest.raises(AssertionError, match=f"The number of modules 2 is not equal to the {message}"):
        dp_torch.parallel_apply([nn.Identity(), nn.Identity()], **kwargs)


def test_no_modules_is_an_error():
    with pytest.raises(ValueError, match="modules is empty"):
        dp_torch.parallel_apply([], [])


def test_lowest_failing_replica_is_reraised_with_its_type_and_device():
    modules = [nn.Identity(), Fails(KeyError("boom")), Fails(ValueError("later"))]
    with pytest.raises(KeyError, match=r"Caught KeyError in replica 1 on device cpu\.\nOriginal Traceback"):
        dp_torch.parallel_apply(modules, [torch.ones(1)] * 3, devices=cpus(3))


def test_failing_single_replica_is_wrapped_too():
    with pytest.raises(ValueError, match=r"Caught ValueError in replica 0 on device cpu"):
        dp_torch.parallel_apply([Fails(ValueError("x"))], [torch.ones(1)], devices=["cpu"])


def test_unknown_device_names_the_argument():
    missing = f"cuda:{torch.cuda.device_count() + 3}"
    absent = "which does not exist" if torch.cuda.is_available() else "but this machine has no cuda device"
    with pytest.raises(ValueError, match=rf"devices\[1\]='{missing}' names {missing}, {absent}"):
        dp_torch.parallel_apply([nn.Identity()] * 2, [1, 2], devices=["cpu", missing])


def test_inference_mode_reaches_the_worker_threads():
    nets = [nn.BatchNorm1d(2), nn.BatchNorm1d(2)]  # in-place buffer updates need inference mode here
    with torch.inference_mode():
        outputs = dp_torch.parallel_apply(nets, [torch.randn(3, 2)] * 2, devices=cpus(2))
    assert all(o.is_inference() for o in outputs)
