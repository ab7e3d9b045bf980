"""dp_torch.DataParallel / data_parallel against stock PyTorch (via the CPU oracle), same inputs.

Each case compares outputs, gradients on the original parameters (and grad-requiring buffers),
module state after the step (BN running stats, num_batches_tracked), forward warnings and
errors (only the cases of tests/_cases_torch.py that name one may raise, and then both must
raise it). Stock gets device ids 0..n-1, dp_torch gets ["cpu"] * n: the same n replicas.
"""
import copy

import pytest
import torch
from _cases_torch import DEFAULT_CASES, SLOW_CASES, Case
from _helpers_oracle import assert_same_run, record
from _zoo_torch import make_model, model_input
from torch_oracle import stock  # noqa: F401  (pytest fixture)

import dp_torch


def case_id(case: Case) -> str:
    return case.id


def run_class(stock, case: Case, steps=2):
    """Two training steps of stock vs dp_torch DataParallel; every step's records must agree."""
    name, batch, n, dim, grad = case.model, case.batch, case.replicas, case.dim, case.grad
    seed = 100 * batch + 10 * n + dim
    ours_model = make_model(name, seed, dim)
    stock_model = copy.deepcopy(ours_model)
    stock_dp = stock.DataParallel(stock_model, device_ids=stock.devices(n), dim=dim)
    ours_dp = dp_torch.DataParallel(ours_model, device_ids=["cpu"] * n, dim=dim)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = model_input(name, batch, gen, dim)
        with torch.set_grad_enabled(grad):
            expected = record(lambda x=x: stock_dp(x), stock_model)
            actual = record(lambda x=x: ours_dp(x), ours_model)
        assert_same_run(expected, actual, expect_error=case.error)
    return expected


def run_function(stock, case: Case):
    name, batch, n, dim, grad = case.model, case.batch, case.replicas, case.dim, case.grad
    seed = 7 + batch + n
    ours_model = make_model(name, seed, dim)
    stock_model = copy.deepcopy(ours_model)
    x = model_input(name, batch, torch.Generator().manual_seed(seed), dim)
    with torch.set_grad_enabled(grad):
        expected = record(lambda: stock.data_parallel(stock_model, x, stock.devices(n), dim=dim), stock_model)
        actual = record(lambda: dp_torch.data_parallel(ours_model, x, ["cpu"] * n, dim=dim), ours_model)
    assert_same_run(expected, actual, expect_error=case.error)
    return expected


@pytest.mark.parametrize("case", DEFAULT_CASES, ids=case_id)
def test_dataparallel_matches_stock(stock, case):
    run_class(stock, case)


@pytest.mark.parametrize("case", DEFAULT_CASES[::3], ids=case_id)
def test_functional_data_parallel_matches_stock(stock, case):
    run_function(stock, case)


@pytest.mark.slow
@pytest.mark.parametrize("case", SLOW_CASES, ids=case_id)
def test_dataparallel_matches_stock_full_matrix(stock, case):
    run_class(stock, case)


@pytest.mark.slow
@pytest.mark.parametrize("case", SLOW_CASES[::4], ids=case_id)
def test_functional_data_parallel_matches_stock_full_matrix(stock, case):
    run_function(stock, case)


def test_batchnorm_running_stats_after_two_steps_match_stock_and_moved(stock):
    expected = run_class(stock, Case("conv_bn", 8, 4, 0, True))
    assert expected.state["bn.num_batches_tracked"].item() == 2
    fresh = make_model("conv_bn", 100 * 8 + 10 * 4, 0)
    assert not torch.allclose(expected.state["bn.running_mean"], fresh.bn.running_mean)
