"""The oracle itself: stock torch.nn.parallel on CPU behaves as PyTorch documents it does on GPUs."""
import copy
import threading

import pytest
import torch
import torch_oracle
from _helpers_oracle import aliasing_table, weighted_sum
from _zoo_torch import MLP
from torch import nn
from torch_oracle import stock, stock_parallel_on_cpu  # noqa: F401  (stock is a fixture)


def test_without_the_oracle_stock_dataparallel_is_a_plain_pass_through_on_cpu():
    dp = torch.nn.DataParallel(MLP(), device_ids=[0, 1])
    assert dp.device_ids == []
    assert not hasattr(torch._C, "_broadcast_coalesced")


def test_without_the_oracle_stock_gather_refuses_cpu_tensors():
    with pytest.raises(AssertionError, match="Gather function not implemented for CPU tensors"):
        torch.nn.parallel.gather([torch.ones(2), torch.ones(2)], 0)


def test_oracle_restores_every_patch_on_exit():
    functions = torch_oracle.stock_functions
    before = (functions.Broadcast, torch_oracle.stock_parallel_apply.torch,
              torch_oracle.stock_data_parallel._get_available_device_type)
    with stock_parallel_on_cpu():
        assert functions.Broadcast is not before[0]
        assert callable(torch._C._scatter)
    after = (functions.Broadcast, torch_oracle.stock_parallel_apply.torch,
             torch_oracle.stock_data_parallel._get_available_device_type)
    assert after == before
    assert not hasattr(torch._C, "_scatter") and not hasattr(torch._C, "_gather")


def test_oracle_restores_patches_when_the_block_raises():
    with pytest.raises(KeyError):
        with stock_parallel_on_cpu():
            raise KeyError("boom")
    assert not hasattr(torch._C, "_broadcast_coalesced")
    with stock_parallel_on_cpu():  # and can be entered again
        pass


def test_oracle_cannot_be_nested():
    with stock_parallel_on_cpu():
        with pytest.raises(RuntimeError, match="cannot be nested"):
            with stock_parallel_on_cpu():
                pass


def test_recompiled_functions_module_differs_from_stock_only_by_the_cpu_asserts():
    module = torch_oracle.cpu_functions_module()
    assert module.__file__ == torch_oracle.stock_functions.__file__
    assert set(torch_oracle._FUNCTION_NAMES) <= set(vars(module))
    # Stock logic still there: the scalar gather warning comes from the recompiled Gather.
    with stock_parallel_on_cpu():
        with pytest.warns(UserWarning, match="all input tensors were scalars"):
            out = module.Gather.apply(0, 0, torch.tensor(1.0), torch.tensor(2.0))
    assert out.tolist() == [1.0, 2.0]


@pytest.mark.parametrize("batch", [3, 5, 8, 13])
@pytest.mark.parametrize("seed", [0, 1])
def test_stock_dataparallel_on_3_replicas_matches_single_device(stock, batch, seed):
    torch.manual_seed(seed)
    model = MLP()
    reference = copy.deepcopy(model)
    x = torch.randn(batch, 6)
    out = stock.DataParallel(model, device_ids=[0, 1, 2])(x)
    expected = reference(x)
    weighted_sum(out).backward()
    weighted_sum(expected).backward()
    torch.testing.assert_close(out, expected)
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad)


@pytest.mark.parametrize("batch", [6, 8])
def test_stock_batchnorm_running_stats_are_the_chunk_0_update(stock, batch):
    torch.manual_seed(batch)
    model = nn.Sequential(nn.Linear(4, 5), nn.BatchNorm1d(5))
    chunk0_only = copy.deepcopy(model)
    x = torch.randn(batch, 4)
    stock.DataParallel(model, device_ids=[0, 1, 2])(x)
    chunk0_only(x.chunk(3)[0])
    torch.testing.assert_close(model[1].running_mean, chunk0_only[1].running_mean)
    torch.testing.assert_close(model[1].running_var, chunk0_only[1].running_var)
    assert model[1].num_batches_tracked.item() == 1


def test_stock_replicate_with_grad_gives_replica_0_views_and_copies_elsewhere(stock):
    model = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3))
    table = aliasing_table(model, stock.replicate(model, [0, 1, 2]))
    # (aliasing, requires_grad, is Parameter, is leaf) per replica
    assert table["0.weight"] == [("shares", True, False, False), ("copy", True, False, False),
                                 ("copy", True, False, False)]
    assert table["1.running_mean"][0] == ("same", False, False, True)
    assert table["1.running_mean"][1][0] == "copy"


def test_stock_replicate_detached_gives_replica_0_the_original_parameters(stock):
    model = nn.Linear(3, 3)
    table = aliasing_table(model, stock.replicate(model, [0, 1], detach=True))
    assert table["weight"] == [("same", True, True, True), ("copy", False, False, True)]


def test_stock_replica_gradients_are_summed_onto_the_original(stock):
    torch.manual_seed(3)
    model = nn.Linear(4, 2)
    xs = [torch.randn(2, 4) for _ in range(3)]
    replicas = stock.replicate(model, [0, 1, 2])
    sum(weighted_sum(r(x)) for r, x in zip(replicas, xs)).backward()
    expected = [torch.zeros_like(p) for p in model.parameters()]
    for x in xs:
        reference = copy.deepcopy(model)
        weighted_sum(reference(x)).backward()
        expected = [e + q.grad for e, q in zip(expected, reference.parameters())]
    for p, e in zip(model.parameters(), expected):
        torch.testing.assert_close(p.grad, e)


# Gather records CPU inputs as device -1, so its double backward gathers "to -1" (oracle artifact).
@pytest.mark.filterwarnings("ignore:Using -1 to represent CPU tensor:FutureWarning")
def test_stock_double_backward_through_replicate_and_gather(stock):
    torch.manual_seed(4)
    model = nn.Linear(3, 1)
    reference = copy.deepcopy(model)
    x = torch.randn(5, 3)
    out = stock.DataParallel(model, device_ids=[0, 1, 2])(x)
    (g,) = torch.autograd.grad((out ** 2).sum(), model.weight, create_graph=True)
    g.sum().backward()
    (g_ref,) = torch.autograd.grad((reference(x) ** 2).sum(), reference.weight, create_graph=True)
    g_ref.sum().backward()
    torch.testing.assert_close(g, g_ref)
    torch.testing.assert_close(model.weight.grad, reference.weight.grad)


def test_stock_parallel_apply_runs_replicas_concurrently_and_one_replica_inline(stock):
    seen = []
    all_three = threading.Barrier(3, timeout=10)  # breaks unless the 3 replicas run at once

    class Spy(nn.Module):
        def forward(self, x):
            seen.append(threading.current_thread())
            if len(x) == 3:
                all_three.wait()
            return x

    stock.parallel_apply([Spy(), Spy(), Spy()], [torch.ones(3)] * 3, None, [0, 1, 2])
    assert threading.current_thread() not in seen
    seen.clear()
    stock.parallel_apply([Spy()], [torch.ones(1)], None, [0])
    assert seen == [threading.current_thread()]


def test_stock_parallel_apply_reraises_the_lowest_failing_replica(stock):
    class FailsOn(nn.Module):
        def forward(self, x):
            if x.item() >= 1:
                raise KeyError(f"bad {x.item()}")
            return x

    inputs = [torch.tensor([float(i)]) for i in range(3)]
    with pytest.raises(KeyError, match="Caught KeyError in replica 1 on device 1"):
        stock.parallel_apply([FailsOn()] * 3, inputs, None, [0, 1, 2])


@pytest.mark.parametrize(("batch", "sizes"), [(5, [2, 2, 1]), (13, [4, 4, 4, 1]), (3, [1, 1, 1])])
def test_stock_scatter_uses_chunk_sizes_and_keeps_views(stock, batch, sizes):
    x = torch.randn(batch, 2)
    chunks = stock.scatter(x, [0, 1, 2, 3])
    assert [c.shape[0] for c in chunks] == sizes
    assert all(c.untyped_storage().data_ptr() == x.untyped_storage().data_ptr() for c in chunks)


def test_oracle_runs_in_a_process_where_dp_torch_installed_virtual_devices():
    # An in-process `comparisons` run with torch_devices='auto' installs vdev for the whole process,
    # and then torch.accelerator.is_available() is True: stock Scatter took its CPU->GPU copy-stream
    # path and called record_stream on CPU chunks. Fresh interpreter: the suite order must not matter.
    import subprocess
    import sys
    from pathlib import Path

    tests = Path(__file__).parents[1]
    code = (
        "import sys, torch; sys.path.insert(0, sys.argv[1])\n"
        "import dp_torch.virtual as v; v.install(4)\n"
        "assert torch.accelerator.is_available()\n"
        "from torch_oracle import stock_parallel_on_cpu\n"
        "torch.manual_seed(int(sys.argv[2])); x = torch.randn(7, 3); m = torch.nn.Linear(3, 2)\n"
        "with stock_parallel_on_cpu() as s:\n"
        "    out = s.DataParallel(m, device_ids=[0, 1, 2])(x)\n"
        "    out.sum().backward()\n"
        "torch.testing.assert_close(out, m(x))\n"
    )
    seed = str(torch.randint(0, 2**16, ()).item())
    done = subprocess.run([sys.executable, "-c", code, str(tests), seed], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
