"""gather joins what stock gather joins: any iterable output is rebuilt as type(out)(gathered items).

Checked against stock torch.nn.parallel through the CPU oracle; where dp_torch refuses on purpose
(text, sets, non-iterables), its message says what PyTorch does there.
"""
import pytest
import torch
from _helpers_oracle import assert_same_tree
from torch_oracle import stock  # noqa: F401  (pytest fixture)

import dp_torch


class LayerCache:
    """A cache object like transformers' DynamicCache: built from, and iterating, (keys, values) per layer."""

    def __init__(self, layers=()):
        self.layers = [tuple(layer) for layer in layers]

    def __iter__(self):
        return iter(self.layers)


def replica_caches(batch_sizes, layers=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [LayerCache((torch.randn(b, 2, 3, generator=g, requires_grad=True),
                        torch.randn(b, 2, 3, generator=g)) for _ in range(layers)) for b in batch_sizes]


@pytest.mark.parametrize("batch_sizes", [(3, 2), (2, 2, 1), (4,)])
def test_a_cache_object_is_gathered_as_stock_gathers_it(stock, batch_sizes):
    outputs = replica_caches(batch_sizes)
    expected = stock.gather(outputs, 0)
    actual = dp_torch.gather(outputs, "cpu")
    assert type(actual) is type(expected) is LayerCache
    assert_same_tree(expected.layers, actual.layers, rtol=0, atol=0)
    assert actual.layers[0][0].shape == (sum(batch_sizes), 2, 3)
    actual.layers[1][0].sum().backward()  # gathered through Gather: gradients reach every replica's tensor
    assert all(cache.layers[1][0].grad is not None for cache in outputs)


def test_a_cache_inside_a_dict_output_is_gathered_as_stock_gathers_it(stock):
    outputs = [{"logits": torch.full((b, 4), float(b)), "cache": cache}
               for b, cache in zip((3, 2), replica_caches((3, 2)))]
    expected, actual = stock.gather(outputs, 0), dp_torch.gather(outputs, "cpu")
    assert_same_tree(expected["logits"], actual["logits"], rtol=0, atol=0)
    assert_same_tree(expected["cache"].layers, actual["cache"].layers, rtol=0, atol=0)


def test_replicas_with_different_numbers_of_items_fail_in_both(stock):
    outputs = [LayerCache([(torch.ones(1), torch.ones(1))] * 2), LayerCache([(torch.ones(1), torch.ones(1))])]
    with pytest.raises(ValueError):
        stock.gather(outputs, 0)
    with pytest.raises(ValueError, match=r"gather: out has 2 items on replica 0 but 1 on replica 1"):
        dp_torch.gather(outputs, "cpu")


def test_a_constructor_that_does_not_take_items_fails_in_both_and_dp_torch_says_why(stock):
    class NoArgs:
        def __init__(self):
            self.items = [torch.ones(2)]

        def __iter__(self):
            return iter(self.items)

    with pytest.raises(TypeError, match="positional argument"):
        stock.gather([NoArgs(), NoArgs()], 0)
    with pytest.raises(TypeError, match=r"gather: out is a NoArgs.*NoArgs\(gathered items\).*positional argument"):
        dp_torch.gather([NoArgs(), NoArgs()], "cpu")


@pytest.mark.parametrize(("value", "pytorch"), [
    ("label", "the text of a map object"),
    ({torch.ones(1)}, "set iteration order"),
    (3, "fails too"),
])
def test_refusals_say_what_pytorch_does(value, pytorch):
    with pytest.raises(TypeError, match=f"gather: out is .*PyTorch.*{pytorch}"):
        dp_torch.gather([value, value], "cpu")
