"""dp_torch vs STOCK torch.nn.DataParallel, both on virtual devices (stock via stock_comm).

Same model, same batch: outputs, gradients, buffer updates (BatchNorm stats from chunk 0) and
per-replica placement must agree. A representative subset runs by default; the whole matrix
is marked slow.
"""
import contextlib
import itertools
from dataclasses import dataclass

import pytest
import torch
from torch import nn

import dp_torch
from dp_torch import virtual
from _helpers_virtual import (BufferWithGrad, ConvBN, SeqLSTM, TiedWeights, TwoLayer, on_device,
                              replica_tensors, tensors_of)

# model -> (factory, input maker (batch, dim) -> tensor, batch dims worth testing)
MODELS = {
    "mlp": (TwoLayer, lambda b, dim: torch.randn(b, 5) if dim == 0 else torch.randn(2, b, 5), (0, 1)),
    "conv_bn": (ConvBN, lambda b, dim: torch.randn(b, 3, 6, 6), (0,)),
    "lstm": (SeqLSTM, lambda b, dim: torch.randn(4, b, 5), (1,)),
    "tied": (TiedWeights, lambda b, dim: torch.randn(b, 5), (0,)),
    "buffer_with_grad": (BufferWithGrad, lambda b, dim: torch.randn(b, 5), (0,)),
}
BATCHES, REPLICAS = (1, 3, 5, 8, 13), (1, 2, 3, 4)
DEFAULT_CASES = [  # (model, batch, replicas, dim, grad): every model, batch, count and dim once
    ("mlp", 8, 4, 0, True), ("mlp", 13, 3, 1, True), ("mlp", 5, 1, 0, False),
    ("conv_bn", 5, 4, 0, True), ("conv_bn", 3, 2, 0, False), ("lstm", 5, 2, 1, True),
    ("tied", 1, 4, 0, True), ("tied", 13, 4, 0, False), ("buffer_with_grad", 8, 3, 0, True),
]
ALL_CASES = [(m, b, n, d, g) for m, (_, _, dims) in MODELS.items()
             for b, n, d, g in itertools.product(BATCHES, REPLICAS, dims, (True, False))]
SLOW_CASES = [c for c in ALL_CASES if c not in DEFAULT_CASES]


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


def check_against_stock(model, batch, n, dim, grad):
    make, make_input, _ = MODELS[model]
    torch.manual_seed(1000 * n + batch)
    base, x = make(), make_input(batch, dim)
    vdevs = virtual.devices()[:n]
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


@pytest.mark.parametrize("model, batch, n, dim, grad", DEFAULT_CASES)
def test_dp_torch_matches_stock_data_parallel(model, batch, n, dim, grad):
    check_against_stock(model, batch, n, dim, grad)


@pytest.mark.slow
@pytest.mark.parametrize("model, batch, n, dim, grad", SLOW_CASES)
def test_dp_torch_matches_stock_data_parallel_full_matrix(model, batch, n, dim, grad):
    check_against_stock(model, batch, n, dim, grad)


def test_batchnorm_stats_come_from_chunk_0_in_both():
    torch.manual_seed(11)
    base, x = ConvBN(), torch.randn(8, 3, 6, 6)
    stock = _run(StockDataParallel, [0, 1, 2, 3], base, x, 0, True, virtual.stock_comm())
    reference = on_device(base, "cpu")
    reference(x[:2])  # chunk 0 of 8 on 4 devices
    for name in ("bn.running_mean", "bn.running_var", "bn.num_batches_tracked"):
        torch.testing.assert_close(stock.state[name].cpu(), reference.get_buffer(name))
    check_against_stock("conv_bn", 8, 4, 0, True)
