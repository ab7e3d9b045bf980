"""dp_torch.DataParallel / data_parallel against stock PyTorch (via the CPU oracle), same inputs.

Each case compares outputs, gradients on the original parameters (and grad-requiring buffers),
module state after the step (BN running stats, num_batches_tracked), forward warnings and
error types. Stock gets device ids 0..n-1, dp_torch gets ["cpu"] * n: the same n replicas.
"""
import copy
import itertools

import pytest
import torch

import dp_torch
from _helpers_oracle import MODELS, assert_same_run, make_model, model_input, record
from torch_oracle import stock  # noqa: F401  (pytest fixture)

BATCHES = (1, 3, 5, 8, 13)
REPLICAS = (1, 2, 3, 4)
BATCH_DIM_1_MODELS = ("mlp", "lstm", "tied", "buffer_rg")  # conv_bn takes (B, C, H, W) only

# (model, batch, replicas, dim, grad): every model, batch, replica count, dim and grad mode once.
DEFAULT_CASES = [
    ("mlp", 5, 4, 0, True), ("mlp", 13, 3, 1, True), ("mlp", 1, 2, 0, False),
    ("conv_bn", 8, 3, 0, True), ("conv_bn", 5, 4, 0, False), ("conv_bn", 3, 1, 0, True),
    ("lstm", 5, 4, 0, True), ("lstm", 8, 3, 1, True), ("lstm", 3, 2, 1, False),
    ("tied", 13, 4, 0, True), ("tied", 3, 3, 1, False),
    ("buffer_rg", 8, 2, 0, True), ("buffer_rg", 5, 3, 1, True), ("buffer_rg", 1, 4, 0, True),
]


def all_cases():
    for name, batch, n, dim, grad in itertools.product(MODELS, BATCHES, REPLICAS, (0, 1), (True, False)):
        if dim == 1 and name not in BATCH_DIM_1_MODELS:
            continue
        case = (name, batch, n, dim, grad)
        if case not in DEFAULT_CASES:
            yield case


def case_id(case):
    name, batch, n, dim, grad = case
    return f"{name}-batch{batch}-on{n}-dim{dim}-{'grad' if grad else 'nograd'}"


def run_class(stock, name, batch, n, dim, grad, steps=2):
    """Two training steps of stock vs dp_torch DataParallel; every step's records must agree."""
    seed = 100 * batch + 10 * n + dim
    ours_model = make_model(name, seed, dim)
    stock_model = copy.deepcopy(ours_model)
    stock_dp = stock.DataParallel(stock_model, device_ids=stock.devices(n), dim=dim)
    ours_dp = dp_torch.DataParallel(ours_model, device_ids=["cpu"] * n, dim=dim)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = model_input(name, batch, gen, dim)
        with torch.set_grad_enabled(grad):
            expected = record(lambda: stock_dp(x), stock_model)
            actual = record(lambda: ours_dp(x), ours_model)
        assert_same_run(expected, actual)
    return expected


def run_function(stock, name, batch, n, dim, grad):
    seed = 7 + batch + n
    ours_model = make_model(name, seed, dim)
    stock_model = copy.deepcopy(ours_model)
    x = model_input(name, batch, torch.Generator().manual_seed(seed), dim)
    with torch.set_grad_enabled(grad):
        expected = record(lambda: stock.data_parallel(stock_model, x, stock.devices(n), dim=dim), stock_model)
        actual = record(lambda: dp_torch.data_parallel(ours_model, x, ["cpu"] * n, dim=dim), ours_model)
    assert_same_run(expected, actual)
    return expected


@pytest.mark.parametrize("case", DEFAULT_CASES, ids=case_id)
def test_dataparallel_matches_stock(stock, case):
    expected = run_class(stock, *case)
    assert expected.error is None  # the default cases are all valid runs


@pytest.mark.parametrize("case", DEFAULT_CASES[::3], ids=case_id)
def test_functional_data_parallel_matches_stock(stock, case):
    run_function(stock, *case)


@pytest.mark.slow
@pytest.mark.parametrize("case", list(all_cases()), ids=case_id)
def test_dataparallel_matches_stock_full_matrix(stock, case):
    run_class(stock, *case)


@pytest.mark.slow
@pytest.mark.parametrize("case", list(all_cases())[::4], ids=case_id)
def test_functional_data_parallel_matches_stock_full_matrix(stock, case):
    run_function(stock, *case)


def test_batchnorm_running_stats_after_two_steps_match_stock_and_moved(stock):
    expected = run_class(stock, "conv_bn", 8, 4, 0, True)
    assert expected.state["bn.num_batches_tracked"].item() == 2
    fresh = make_model("conv_bn", 100 * 8 + 10 * 4, 0)
    assert not torch.allclose(expected.state["bn.running_mean"], fresh.bn.running_mean)
