"""dp_torch vs STOCK torch.nn.DataParallel, both on virtual devices (stock via stock_comm).

Same model, same batch: outputs, gradients, buffer updates (BatchNorm stats from chunk 0) and
per-replica placement must agree. The cases are tests/_cases_torch.py's, the same as the CPU-oracle
matrix's: a representative subset runs by default; the whole matrix is marked slow.
"""
import contextlib
from dataclasses import dataclass

import pytest
import torch
from _cases_torch import DEFAULT_CASES, SLOW_CASES, Case
from _helpers_virtual import on_device, replica_tensors, tensors_of
from _zoo_torch import ConvBN, make_model, model_input
from torch import nn

import dp_torch
from dp_torch import virtual


class StockDataParallel(nn.DataParallel):
    def replicate(self, module, device_ids):
        self.replicas = super().replicate(module, device_ids)
        return self.replicas


class OurDataParallel(dp_torch.DataParallel):
    def replicate(self, module, device_ids):
        self.replicas = super().replicate(module, device_ids)
        return self.replicas


@dataclass
class Run:
    output: torch.Tensor
    grads: dict
    state: dict          # parameters and buffers of the original after the step
    placement: list      # per replica: {name: device}


def _run(dp_class, device_ids, base, x, dim, grad, comm):
    model = on_device(base, virtual.devices()[0])
    dp = dp_class(model, device_ids=device_ids, dim=dim)
    dp.replicas = [model]  # a single device runs the module itself, no replicate
    with comm, torch.set_grad_enabled(grad):
        output = dp(x)
        if grad:
            output.square().mean().backward()
    named = tensors_of(model)
    return Run(
        output=output.detach(),
        grads={k: t.grad for k, t in named.items() if t.is_leaf and t.grad is not None},
        state={k: t.detach() for k, t in named.items()},
        placement=[{k: t.device for k, t in replica_tensors(model, r).items()}
                   for r in dp.replicas],
    )


def _assert_same_on_same_device(ours, stock, what, **tol):
    assert ours.device == stock.device, f"{what}: {ours.device} vs stock {stock.device}"
    torch.testing.assert_close(ours.cpu(), stock.cpu(), msg=lambda m: f"{what}: {m}", **tol)


def check_against_stock(case: Case):
    model, batch, n, dim, grad = case.model, case.batch, case.replicas, case.dim, case.grad
    seed = 1000 * n + batch
    base, x = make_model(model, seed, dim), model_input(model, batch, torch.Generator().manual_seed(seed), dim)
    vdevs = virtual.devices()[:n]
    if case.error is not None:  # only where the case table says so, and then both must raise it
        with pytest.raises(case.error):
            _run(StockDataParallel, list(range(n)), base, x, dim, grad, virtual.stock_comm())
        with pytest.raises(case.error):
            _run(OurDataParallel, vdevs, base, x, dim, grad, contextlib.nullcontext())
        return
    stock = _run(StockDataParallel, list(range(n)), base, x, dim, grad, virtual.stock_comm())
    ours = _run(OurDataParallel, vdevs, base, x, dim, grad, contextlib.nullcontext())

    _assert_same_on_same_device(ours.output, stock.output, "output", rtol=0, atol=0)
    assert ours.grads.keys() == stock.grads.keys()
    assert bool(ours.grads) == grad
    if grad and model == "buffer_with_grad":
        assert "scale" in ours.grads
    for name in stock.grads:
        _assert_same_on_same_device(ours.grads[name], stock.grads[name], f"grad of {name}",
                                    rtol=1e-5, atol=1e-6)
    for name in stock.state:  # includes BatchNorm running stats, updated from chunk 0 only
        _assert_same_on_same_device(ours.state[name], stock.state[name], name, rtol=0, atol=0)
    assert ours.placement == stock.placement
    for i, replica in enumerate(ours.placement):
        assert set(replica.values()) == {vdevs[i]}, f"replica {i}: {replica}"


@pytest.mark.parametrize("case", DEFAULT_CASES, ids=lambda case: case.id)
def test_dp_torch_matches_stock_data_parallel(case):
    check_against_stock(case)


@pytest.mark.slow
@pytest.mark.parametrize("case", SLOW_CASES, ids=lambda case: case.id)
def test_dp_torch_matches_stock_data_parallel_full_matrix(case):
    check_against_stock(case)


def test_batchnorm_stats_come_from_chunk_0_in_both():
    torch.manual_seed(11)
    base, x = ConvBN(), torch.randn(8, 3, 5, 5)
    stock = _run(StockDataParallel, [0, 1, 2, 3], base, x, 0, True, virtual.stock_comm())
    reference = on_device(base, "cpu")
    reference(x[:2])  # chunk 0 of 8 on 4 devices
    for name in ("bn.running_mean", "bn.running_var", "bn.num_batches_tracked"):
        torch.testing.assert_close(stock.state[name].cpu(), reference.get_buffer(name))
    check_against_stock(Case("conv_bn", 8, 4, 0, True))
