"""DataParallel with nested inputs/outputs, kwargs, no inputs, and what replicas alias: stock vs dp_torch."""
import copy

import pytest
import torch
from _helpers_oracle import Pair, aliasing, assert_same_run, record
from torch import nn
from torch_oracle import stock  # noqa: F401  (pytest fixture)

import dp_torch


class Nested(nn.Module):
    """Takes a dict holding a namedtuple and a list; returns every container kind, a None and a scalar."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 2)

    def forward(self, batch, scale=1.0):
        a = self.lin(batch["x"]) * scale
        b = batch["pair"].first * a.sum(1, keepdim=True)
        kept, missing = batch["extra"]
        assert missing is None and batch["tag"] == "same object everywhere"
        return {"out": a, "pair": Pair(a, b), "list": [kept + 1, None], "tuple": (b,), "loss": a.pow(2).mean()}


def nested_batch(batch: int, seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {
        "x": torch.randn(batch, 3, generator=g),
        "pair": Pair(torch.randn(batch, 1, generator=g), None),
        "extra": [torch.randn(batch, 4, generator=g), None],
        "tag": "same object everywhere",
    }


def compare(stock_dp_factory, ours_dp_factory, model, call, grad=True):
    twin = copy.deepcopy(model)
    stock_dp, ours_dp = stock_dp_factory(model), ours_dp_factory(twin)
    with torch.set_grad_enabled(grad):
        expected = record(lambda: call(stock_dp), model)
        actual = record(lambda: call(ours_dp), twin)
    assert_same_run(expected, actual)
    return expected


@pytest.mark.parametrize("grad", [True, False])
@pytest.mark.parametrize(("batch", "n"), [(3, 2), (5, 4), (8, 3), (13, 4)])
def test_nested_inputs_and_outputs_match_stock_with_the_scalar_warning(stock, batch, n, grad):
    torch.manual_seed(batch)
    inputs = nested_batch(batch, seed=n)
    expected = compare(lambda m: stock.DataParallel(m, device_ids=stock.devices(n)),
                       lambda m: dp_torch.DataParallel(m, device_ids=["cpu"] * n),
                       Nested(), lambda dp: dp(inputs, scale=torch.full((batch, 1), 0.5)), grad)
    replicas_used = len(torch.empty(batch).chunk(n))
    assert expected.output["loss"].shape == (replicas_used,)
    assert [w[0] for w in expected.warnings] == [UserWarning]


def test_quirk_a_non_tensor_kwarg_starts_replicas_without_positional_args_in_both(stock):
    errors = []
    for dp in (stock.DataParallel(Nested(), device_ids=stock.devices(4)),
               dp_torch.DataParallel(Nested(), device_ids=["cpu"] * 4)):
        with pytest.raises(TypeError, match="missing 1 required positional argument: 'batch'") as err:
            dp(nested_batch(2, seed=0), scale=2.0)
        errors.append(str(err.value).splitlines()[0])
    assert errors[0].startswith("Caught TypeError in replica 2 on device ")
    assert errors[1].startswith("Caught TypeError in replica 2 on device ")


def test_forward_without_inputs_runs_one_replica_and_returns_a_vector_in_both(stock):
    class Constant(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.tensor(3.0))

        def forward(self):
            return self.w * 2

    expected = compare(lambda m: stock.DataParallel(m, device_ids=stock.devices(3)),
                       lambda m: dp_torch.DataParallel(m, device_ids=["cpu"] * 3),
                       Constant(), lambda dp: dp())
    assert expected.output.tolist() == [6.0]
    assert [str(w[1]) for w in expected.warnings] == [
        "Was asked to gather along dimension 0, but all input tensors were scalars; "
        "will instead unsqueeze and return a vector."]


class AliasSpy(nn.Module):
    """Records, per chunk, the tensors its replica holds (the log list is shared by every replica)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(2, 2)
        self.bn = nn.BatchNorm1d(2)
        self.log = []

    def forward(self, x):
        self.log.append((int(x[0, 0]), self.lin.weight, self.bn.running_mean))
        return self.bn(self.lin(x))


def replica_aliasing(dp_class, devices, grad):
    torch.manual_seed(0)
    model = AliasSpy()
    x = torch.randn(6, 2)
    x[:, 0] = torch.arange(6.0)  # column 0 says which chunk a replica got
    with torch.set_grad_enabled(grad):
        dp_class(model, device_ids=devices)(x)
    return [(aliasing(model.lin.weight, w), aliasing(model.bn.running_mean, rm), w.requires_grad)
            for _, w, rm in sorted(model.log, key=lambda entry: entry[0])]


@pytest.mark.parametrize("grad", [True, False])
def test_dataparallel_replica_aliasing_matches_stock(stock, grad):
    expected = replica_aliasing(stock.DataParallel, stock.devices(3), grad)
    actual = replica_aliasing(dp_torch.DataParallel, ["cpu"] * 3, grad)
    assert actual == expected
    # grad on: replica 0 views the Parameter; no_grad (detach=True): it is the very Parameter.
    assert expected[0] == ("shares" if grad else "same", "same", True)
    assert expected[1:] == [("copy", "copy", grad)] * 2


def test_functional_data_parallel_under_no_grad_still_gives_views_in_both(stock):
    def aliasing_with(fn, devices):
        model = AliasSpy()
        x = torch.arange(8.0).view(4, 2)
        with torch.no_grad():
            fn(model, x, devices)
        first = min(model.log, key=lambda entry: entry[0])
        return aliasing(model.lin.weight, first[1])

    assert aliasing_with(stock.data_parallel, stock.devices(2)) == "shares"
    assert aliasing_with(dp_torch.data_parallel, ["cpu"] * 2) == "shares"


@pytest.mark.filterwarnings("ignore:Using -1 to represent CPU tensor:FutureWarning")  # oracle artefact
@pytest.mark.parametrize("n", [2, 3])
def test_double_backward_through_dataparallel_matches_stock(stock, n):
    torch.manual_seed(n)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    twin = copy.deepcopy(model)
    x = torch.randn(5, 3)
    grads = []
    for dp, m in ((stock.DataParallel(model, device_ids=stock.devices(n)), model),
                  (dp_torch.DataParallel(twin, device_ids=["cpu"] * n), twin)):
        first = torch.autograd.grad(dp(x).pow(2).sum(), list(m.parameters()), create_graph=True)
        sum(g.pow(2).sum() for g in first).backward()
        grads.append([p.grad for p in m.parameters()])
    for theirs, ours in zip(*grads):
        torch.testing.assert_close(ours, theirs)
