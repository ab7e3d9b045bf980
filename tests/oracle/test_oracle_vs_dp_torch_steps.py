"""dp_torch's four steps called directly, against the stock ones (via the CPU oracle)."""
from collections import OrderedDict
from dataclasses import dataclass

import pytest
import torch
from _helpers_oracle import Pair, aliasing, aliasing_table, assert_same_tree
from _zoo_torch import MODELS, make_model, model_input
from torch import nn
from torch_oracle import stock  # noqa: F401  (pytest fixture)

import dp_torch


@dataclass
class Box:
    tensor: torch.Tensor


def nested_inputs(batch: int, seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(batch, 3, generator=g), torch.randn(batch, 2, generator=g)
    return {
        "tensor": x,
        "tuple": (x, "tag", 3),
        "list": [x, [y, None]],
        "dict": {"a": x, "b": (y, 1.5)},
        "ordered_dict": OrderedDict(b=y, a=x),
        "namedtuple": Pair(x, y),
        "dataclass_shared": (x, Box(torch.randn(batch + 1, 2, generator=g))),  # not the batch: dp_torch refuses that
        "empty_containers": (x, (), [], {}),
    }


@pytest.mark.parametrize("batch", [1, 3, 5, 8, 13])
@pytest.mark.parametrize("n", [1, 2, 4])
@pytest.mark.parametrize("kind", list(nested_inputs(1, 0)))
def test_scatter_matches_stock(stock, kind, batch, n):
    obj = nested_inputs(batch, seed=batch + n)[kind]
    expected = stock.scatter(obj, stock.devices(n))
    actual = dp_torch.scatter(obj, ["cpu"] * n)
    assert_same_tree(expected, actual, 0, 0)
    x = obj if kind == "tensor" else torch.utils._pytree.tree_leaves(obj)[0]
    first = actual[0] if kind == "tensor" else torch.utils._pytree.tree_leaves(actual[0])[0]
    assert aliasing(x, first) == "shares"  # a chunk on its own device stays a view, in both


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_scatter_along_other_dims_matches_stock(stock, dim):
    x = torch.randn(6, 7, generator=torch.Generator().manual_seed(dim + 5))
    assert_same_tree(stock.scatter(x, stock.devices(3), dim), dp_torch.scatter(x, ["cpu"] * 3, dim), 0, 0)


@pytest.mark.parametrize(("batch", "kwargs"), [
    (8, {"mask": "tensor"}),            # tensor kwargs split like the args
    (2, {"scale": 2.0}),                 # Quirk A: non-tensor kwargs reach all 4 devices
    (5, {"mask": "tensor", "tag": "t"}),
])
def test_scatter_kwargs_matches_stock_including_quirk_a(stock, batch, kwargs):
    x = torch.randn(batch, 3)
    kwargs = {k: (torch.randn(batch, 1) if v == "tensor" else v) for k, v in kwargs.items()}
    expected = stock.scatter_kwargs((x,), kwargs, stock.devices(4))
    actual = dp_torch.scatter_kwargs((x,), kwargs, ["cpu"] * 4)
    assert_same_tree(expected, actual, 0, 0)


def per_replica_outputs(kind: str, n: int, seed: int) -> list:
    g = torch.Generator().manual_seed(seed)
    outs = []
    for i in range(n):
        x = torch.randn(i + 2, 3, generator=g)  # different batch per replica, like uneven chunks
        outs.append({
            "tensor": x,
            "scalar": x.sum(),
            "tuple": (x, None, x[:, :1]),
            "list": [x, [x * 2]],
            "dict": {"logits": x, "aux": {"h": x + 1}},
            "namedtuple": Pair(x, x.sum(1, keepdim=True)),
            "none": None,
        }[kind])
    return outs


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("kind", ["tensor", "scalar", "tuple", "list", "dict", "namedtuple", "none"])
def test_gather_matches_stock_with_warnings(stock, kind, n):
    outputs = per_replica_outputs(kind, n, seed=n)
    with pytest.warns() if kind == "scalar" else _no_warning() as stock_warnings:
        expected = stock.gather(outputs, 0)
    with pytest.warns() if kind == "scalar" else _no_warning() as our_warnings:
        actual = dp_torch.gather(outputs, "cpu")
    assert_same_tree(expected, actual, 0, 0)
    assert [str(w.message) for w in our_warnings] == [str(w.message) for w in stock_warnings]


@pytest.mark.parametrize(("stock_target", "our_target"), [("cpu", "cpu"), (-1, -1), (0, "cpu"), (None, None)])
def test_gather_target_devices_match_stock_and_always_copy(stock, stock_target, our_target):
    outputs = [torch.randn(2, 3), torch.randn(1, 3)]
    with pytest.warns(FutureWarning) if stock_target == -1 else _no_warning():
        expected = stock.gather(outputs, stock_target)
    with pytest.warns(FutureWarning) if stock_target == -1 else _no_warning():
        actual = dp_torch.gather(outputs, our_target)
    assert_same_tree(expected, actual, 0, 0)
    assert aliasing(outputs[0], actual) == aliasing(outputs[0], expected) == "copy"


def test_gather_along_dim_1_backward_matches_stock(stock):
    parts = [torch.randn(4, k, requires_grad=True) for k in (3, 2)]
    twins = [p.detach().clone().requires_grad_() for p in parts]
    (stock.gather(parts, 0, dim=1) * torch.arange(20.0).view(4, 5)).sum().backward()
    (dp_torch.gather(twins, "cpu", dim=1) * torch.arange(20.0).view(4, 5)).sum().backward()
    for p, t in zip(parts, twins):
        torch.testing.assert_close(t.grad, p.grad)


class _no_warning:
    """pytest.warns' opposite: fail on any warning inside the block."""

    def __enter__(self):
        import warnings

        self._cm = warnings.catch_warnings(record=True)
        self.caught = self._cm.__enter__()
        warnings.simplefilter("always")
        return self.caught

    def __exit__(self, *exc):
        self._cm.__exit__(*exc)
        assert not self.caught, [str(w.message) for w in self.caught]


@pytest.mark.parametrize("detach", [False, True])
@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("name", list(MODELS))
def test_replicate_aliasing_matches_stock(stock, name, n, detach):
    model = make_model(name, seed=n)
    expected = aliasing_table(model, stock.replicate(model, stock.devices(n), detach=detach))
    actual = aliasing_table(model, dp_torch.replicate(model, ["cpu"] * n, detach=detach))
    assert actual == expected


@pytest.mark.parametrize("name", list(MODELS))
def test_replicas_compute_what_stock_replicas_compute(stock, name):
    model = make_model(name, seed=11).eval()
    x = model_input(name, 4, torch.Generator().manual_seed(11))
    for ours, theirs in zip(dp_torch.replicate(model, ["cpu"] * 3), stock.replicate(model, stock.devices(3))):
        torch.testing.assert_close(ours(x), theirs(x))
        assert list(ours.parameters()) == list(theirs.parameters()) == []


def test_replicated_tied_weights_and_shared_children_stay_shared_like_stock(stock):
    model = make_model("tied", seed=0)
    for replicas in (stock.replicate(model, stock.devices(2)), dp_torch.replicate(model, ["cpu"] * 2)):
        for r in replicas:
            assert r.encode.weight is r.decode.weight and r.shared is r.encode


class Doubler(nn.Module):
    def forward(self, x, scale=1.0):
        if not torch.is_grad_enabled():
            return (x * 2 * scale).detach()
        return x * 2 * scale


@pytest.mark.parametrize("grad", [True, False])
@pytest.mark.parametrize("wrap", ["bare", "tuple", "list"])
def test_parallel_apply_matches_stock(stock, grad, wrap):
    xs = [torch.randn(k, 2, requires_grad=True) for k in (3, 2, 1)]
    inputs = {"bare": xs, "tuple": [(x,) for x in xs], "list": [[x] for x in xs]}[wrap]
    kwargs = [{"scale": s} for s in (1.0, 2.0, 3.0)]
    with torch.set_grad_enabled(grad):
        expected = stock.parallel_apply([Doubler()] * 3, inputs, kwargs, stock.devices(3))
        actual = dp_torch.parallel_apply([Doubler()] * 3, inputs, kwargs, ["cpu"] * 3)
    assert_same_tree(expected, actual, 0, 0)
    assert [t.requires_grad for t in actual] == [t.requires_grad for t in expected] == [grad] * 3


class RaisesFrom(nn.Module):
    def __init__(self, first_bad: int, error: type) -> None:
        super().__init__()
        self.first_bad, self.error = first_bad, error

    def forward(self, x):
        if int(x[0]) >= self.first_bad:
            raise self.error(f"replica saw {int(x[0])}")
        return x


@pytest.mark.parametrize("error", [ValueError, KeyError, RuntimeError, ZeroDivisionError])
@pytest.mark.parametrize("first_bad", [0, 2])
def test_parallel_apply_reraises_like_stock(stock, error, first_bad):
    inputs = [torch.tensor([float(i)]) for i in range(3)]
    modules = [RaisesFrom(first_bad, error)] * 3
    with pytest.raises(error) as from_stock:
        stock.parallel_apply(modules, inputs, None, stock.devices(3))
    with pytest.raises(error) as from_ours:
        dp_torch.parallel_apply(modules, inputs, None, ["cpu"] * 3)
    where = f"Caught {error.__name__} in replica {first_bad} on device "
    assert where in str(from_stock.value) and where in str(from_ours.value)
    assert f"replica saw {first_bad}" in str(from_ours.value)


@pytest.mark.parametrize("lengths", [(3, 2, None, None), (3, 3, 2, None), (3, 3, None, 4)])
def test_parallel_apply_length_mismatch_is_an_assertion_error_in_both(stock, lengths):
    n_modules, n_inputs, n_kwargs, n_devices = lengths
    args = ([Doubler()] * n_modules, [torch.ones(1)] * n_inputs,
            None if n_kwargs is None else [{}] * n_kwargs)
    with pytest.raises(AssertionError, match="The number of modules 3 is not equal"):
        stock.parallel_apply(*args, None if n_devices is None else stock.devices(n_devices))
    with pytest.raises(AssertionError, match="The number of modules 3 is not equal"):
        dp_torch.parallel_apply(*args, None if n_devices is None else ["cpu"] * n_devices)


@pytest.mark.parametrize(("outputs", "error"), [
    ([{"a": torch.ones(1)}, {"a": torch.ones(1), "b": torch.ones(1)}], ValueError),  # key counts
    ([{"a": torch.ones(1)}, {"b": torch.ones(1)}], KeyError),                        # missing key
    ([(torch.ones(1), torch.ones(1)), (torch.ones(1),)], ValueError),               # tuple lengths
    ([torch.ones(2, 3), torch.ones(2, 4)], RuntimeError),                           # non-concat dim
    ([torch.ones(2, 3), torch.ones(2)], RuntimeError),                              # ranks
], ids=["dict-key-count", "dict-missing-key", "tuple-length", "shape", "rank"])
def test_gather_of_mismatched_replica_outputs_raises_stocks_exception_type(stock, outputs, error):
    with pytest.raises(error):
        stock.gather(outputs, 0)
    with pytest.raises(error, match="replica 1"):
        dp_torch.gather(outputs, "cpu")


def test_replicate_detached_complex_parameter_is_the_parameter_itself_unlike_stock(stock):
    """Divergence 20: stock's comm treats complex as real, so replica 0 gets a view; we keep the Parameter."""
    model = nn.Linear(2, 2, dtype=torch.cfloat)
    stock_table = aliasing_table(model, stock.replicate(model, stock.devices(2), detach=True))
    ours = dp_torch.replicate(model, ["cpu"] * 2, detach=True)
    assert stock_table["weight"][0] == ("shares", True, False, False)
    assert ours[0].weight is model.weight
    real = nn.Linear(2, 2)  # with real dtypes both give replica 0 the very same Parameter
    assert stock.replicate(real, stock.devices(2), detach=True)[0].weight is real.weight
    assert dp_torch.replicate(real, ["cpu"] * 2, detach=True)[0].weight is real.weight
