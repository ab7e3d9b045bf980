"""Moving a vdev module while an autograd graph holds its parameters: CUDA's semantics, never an abort.

On CUDA `module.to()` sets `param.data`: the move succeeds, the Parameters stay the same objects,
and the graph built before the move still names the old device. A backward through that graph
then fails where CUDA's kernels meet two devices: when the moved gradient is accumulated into
(`param.grad += new_grad`), or when a formula uses the saved parameter itself. Where neither
happens, CUDA's AccumulateGrad (which checks no device) leaves the new gradient on the old device.

Each case runs in a fresh interpreter: before turn 3's hardening such a backward aborted the
process (SIGABRT), which would end the whole test run.
"""
import pytest
import torch
from _helpers_virtual import run_python

_PRELUDE = """
    import torch
    from torch import nn
    from dp_torch import virtual

    virtual.install(4)
    torch.manual_seed({seed})
    model = {make}
    x = {input}
    reference = {make}
    reference.load_state_dict(model.state_dict())
    model.to("vdev:{source}")
    params = list(model.parameters())
    loss = model(x.to("vdev:{source}")).float().pow(2).sum()
"""

# The move succeeds before and after a backward while the graph lives; the Parameters are the
# same objects (optimizers and ties keep them), and a fresh forward/backward on the new device
# gives the CPU's numbers.
_MOVES = _PRELUDE + """
    model{move}
    assert list(model.parameters()) == params and all(p is q for p, q in zip(model.parameters(), params))
    assert {{p.device for p in params}} == {{torch.device("vdev:{target}")}}, [p.device for p in params]
    print("moved under the graph")
    loss2 = model(x.to("vdev:{target}")).float().pow(2).sum()
    loss2.backward(retain_graph=True)
    model{back}
    model{move}
    print("moved again after a backward")
    reference(x).float().pow(2).sum().backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        assert p.device == p.grad.device == torch.device("vdev:{target}"), (p.device, p.grad.device)
        torch.testing.assert_close(p.grad.cpu().to(q.grad.dtype), q.grad)
    print("fresh backward ok")
"""

_CASES = {
    # The graph reaches the weight only through its AccumulateGrad node (x needs no grad).
    "linear_1_to_0": dict(make="nn.Linear(4, 3)", input="torch.randn(5, 4)", source=1, target=0,
                          move='.to("vdev:0")', back='.to("vdev:1")'),
    "embedding_1_to_3": dict(make="nn.Embedding(9, 3)", input="torch.tensor([[1, 4], [8, 0]])",
                             source=1, target=3, move='.to(torch.device("vdev", 3))',
                             back='.to("vdev:1")'),
    "mlp_0_to_2": dict(make="nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 2))",
                       input="torch.randn(3, 4)", source=0, target=2, move='.to("vdev:2")',
                       back='.to("vdev:0")'),
    # LayerNorm's backward saves the weight itself: swap_tensors could never move it.
    "layernorm_2_to_1": dict(make="nn.LayerNorm(4)", input="torch.randn(3, 4)", source=2, target=1,
                             move='.to("vdev:1")', back='.to("vdev:2")'),
}


@pytest.mark.parametrize("case", list(_CASES))
@pytest.mark.parametrize("seed", [0, 7])
def test_a_move_under_a_live_graph_succeeds_and_keeps_the_parameters(case, seed):
    result = run_python(_MOVES.format(seed=seed, **_CASES[case]), timeout=120)
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert result.stdout.splitlines() == [
        "moved under the graph", "moved again after a backward", "fresh backward ok"]


# A backward through the graph built before the move raises a Python RuntimeError naming both
# devices, and the process goes on: the next forward/backward on the new device works.
_OLD_GRAPH_RAISES = _PRELUDE + """
    {before}
    model.to("vdev:{target}")
    try:
        loss.backward()
        print("old backward completed")
    except RuntimeError as error:
        message = str(error)
        assert "vdev:{source}" in message and "vdev:{target}" in message, message
        assert "moved" in message, message
        print("old backward refused")
    model.zero_grad()
    model(x.to("vdev:{target}")).float().pow(2).sum().backward()
    reference(x).float().pow(2).sum().backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        assert p.grad.device == torch.device("vdev:{target}")
        torch.testing.assert_close(p.grad.cpu(), q.grad)
    print("new backward ok")
"""

_RAISING = {
    # The first backward left gradients, which the move carried to the target: CUDA's
    # `param.grad += new_grad` meets two devices.
    "accumulating_into_moved_grads": dict(
        make="nn.Linear(4, 3)", input="torch.randn(5, 4)", source=1, target=0,
        before="loss.backward(retain_graph=True)"),
    # The graph saved the parameter itself (LayerNorm's backward reads the weight).
    "saved_parameter": dict(make="nn.LayerNorm(4)", input="torch.randn(3, 4)", source=0, target=3,
                            before=""),
    # The input needs a gradient too, and the embedding's weight moves with its grad.
    "embedding_with_grads": dict(make="nn.Embedding(9, 3)", input="torch.tensor([[1, 4], [8, 0]])",
                                 source=2, target=1, before="loss.backward(retain_graph=True)"),
}


@pytest.mark.parametrize("case", list(_RAISING))
def test_a_backward_through_the_old_graph_raises_naming_the_devices(case):
    result = run_python(_OLD_GRAPH_RAISES.format(seed=3, **_RAISING[case]), timeout=120)
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert result.stdout.splitlines() == ["old backward refused", "new backward ok"]


def test_an_old_graph_that_only_reaches_the_accumulators_completes_as_on_cuda():
    """No saved parameter and no gradient yet: CUDA's AccumulateGrad keeps the new gradient where
    the graph was (it checks no device), so the backward completes, the gradient on the old device."""
    result = run_python(_PRELUDE.format(seed=5, make="nn.Linear(4, 3)", input="torch.randn(5, 4)",
                                        source=2) + """
    model.to("vdev:0")
    loss.backward()
    reference(x).float().pow(2).sum().backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        assert p.device == torch.device("vdev:0") and p.grad.device == torch.device("vdev:2")
        torch.testing.assert_close(p.grad.cpu(), q.grad)
    print("completed, gradients on vdev:2")
    """, timeout=120)
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert result.stdout.splitlines() == ["completed, gradients on vdev:2"]


# docs/divergences.md 26: under the swap future flag, stock PyTorch swaps a parameter (refusing
# one the graph saved); vdev moves a vdev parameter that a graph holds by `.data`, as without it.
_UNDER_SWAP_FLAG = """
    import torch
    from torch import nn
    from dp_torch import virtual

    virtual.install(4)
    torch.__future__.set_swap_module_params_on_conversion(True)
    torch.manual_seed({seed})
    model = nn.LayerNorm(5).to("{device}")
    weight = model.weight
    loss = model(torch.randn(2, 5, device="{device}")).sum()   # the graph saves the weight
    try:
        model.double()
        assert model.weight is weight and weight.dtype == torch.float64
        print("moved in place")
    except RuntimeError as error:
        assert "Couldn't swap LayerNorm.weight" in str(error), error
        print("refused")
"""


@pytest.mark.parametrize("device, expected", [("cpu", "refused"), ("vdev:2", "moved in place")])
def test_under_the_swap_flag_stock_refuses_a_saved_parameter_and_vdev_moves_it(device, expected):
    result = run_python(_UNDER_SWAP_FLAG.format(seed=len(device), device=device), timeout=120)
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert result.stdout.splitlines() == [expected]


# docs/divergences.md 27: the old graph's error comes before any node runs on vdev; CUDA's comes
# midway, after the unmoved second layer's accumulators (reached first) added their gradients.
_PARTIAL = """
    import torch
    from torch import nn
    {install}
    torch.manual_seed(11)
    model = nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 3)).to("{kind}:1")
    loss = model(torch.randn(6, 4, device="{kind}:1")).pow(2).sum()
    loss.backward(retain_graph=True)
    first = model[2].weight.grad.clone()
    model[0].to("{kind}:0")                      # the first layer moves, with its gradients
    try:
        loss.backward()
    except RuntimeError as error:
        assert "{kind}:0" in str(error) and "{kind}:1" in str(error), error
    print("second layer's gradient doubled:", torch.allclose(model[2].weight.grad, 2 * first))
"""


def test_the_old_graphs_error_comes_before_any_accumulator_runs_on_vdev():
    result = run_python(_PARTIAL.format(install="from dp_torch import virtual; virtual.install(2)",
                                        kind="vdev"), timeout=120)
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert result.stdout.splitlines() == ["second layer's gradient doubled: False"]


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                    reason="CUDA's side needs two GPUs")
def test_the_old_graphs_error_comes_after_the_first_accumulators_on_cuda():
    result = run_python(_PARTIAL.format(install="", kind="cuda"), timeout=120)
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert result.stdout.splitlines() == ["second layer's gradient doubled: True"]


# docs/divergences.md 28: from the CPU, a parameter the graph saved cannot move to vdev (a CPU
# tensor cannot take a vdev wrapper's data, so PyTorch swaps, and refuses); CUDA moves it by .data.
_FROM_THE_CPU = """
    import torch
    from torch import nn
    {install}
    torch.manual_seed(2)
    model = nn.LayerNorm(6)
    weight = model.weight
    loss = model(torch.randn(3, 6)).sum()              # the graph saves the CPU weight
    try:
        model.to("{target}")
        assert model.weight is weight and weight.device.type == "{target}".split(":")[0]
        print("moved in place")
    except RuntimeError as error:
        assert "Couldn't swap LayerNorm.weight" in str(error), error
        print("refused")
"""


def test_a_cpu_parameter_the_graph_saved_is_refused_on_its_way_to_vdev():
    result = run_python(_FROM_THE_CPU.format(install="from dp_torch import virtual; virtual.install(2)",
                                             target="vdev:1"), timeout=120)
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert result.stdout.splitlines() == ["refused"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA's side needs a GPU")
def test_a_cpu_parameter_the_graph_saved_moves_to_cuda_in_place():
    result = run_python(_FROM_THE_CPU.format(install="", target="cuda:0"), timeout=120)
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert result.stdout.splitlines() == ["moved in place"]
