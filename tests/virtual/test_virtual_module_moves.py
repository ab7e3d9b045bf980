"""Moving a vdev module while an autograd graph holds its parameters: refused, never an abort.

Each case runs in a fresh interpreter: before the fix the move went through and the next
backward aborted the process (SIGABRT), which would end the whole test run.
"""
import pytest
from _helpers_virtual import run_python

_SCRIPT = """
    import torch
    from torch import nn
    from dp_torch import virtual

    virtual.install(4)
    torch.manual_seed(0)
    model = {make}
    x = {input}
    reference = {make}
    reference.load_state_dict(model.state_dict())
    reference(x).float().pow(2).sum().backward()

    model.to("vdev:{source}")
    loss = model(x.to("vdev:{source}")).float().pow(2).sum()
    for attempt in ("before backward", "after backward"):
        try:
            model{move}
            print(attempt, "moved")
        except RuntimeError as error:
            assert "Couldn't swap" in str(error), error
            assert "autograd graph" in str(error.__cause__), error.__cause__
            assert {{p.device.index for p in model.parameters()}} == {{{source}}}
            print(attempt, "refused")
        if attempt == "before backward":
            loss.backward()
            for p, q in zip(model.parameters(), reference.parameters()):
                assert p.grad.device == torch.device("vdev:{source}")
                torch.testing.assert_close(p.grad.cpu(), q.grad)
            print("backward ok")
    del loss                                           # the graph lets go of the parameters
    model{move}
    for p, q in zip(model.parameters(), reference.parameters()):
        assert p.device == p.grad.device == torch.device("vdev:{target}"), (p.device, p.grad.device)
        torch.testing.assert_close(p.grad.cpu().to(q.grad.dtype), q.grad)
    print("moved after del")
"""

_CASES = {
    # The graph reaches the weight only through its AccumulateGrad node (x needs no grad).
    "linear_1_to_0": dict(make="nn.Linear(4, 3)", input="torch.randn(5, 4)", source=1, target=0,
                          move='.to("vdev:0")'),
    "embedding_1_to_3": dict(make="nn.Embedding(9, 3)", input="torch.tensor([[1, 4], [8, 0]])",
                             source=1, target=3, move='.to(torch.device("vdev", 3))'),
    "mlp_0_to_2": dict(make="nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 2))",
                       input="torch.randn(3, 4)", source=0, target=2, move='.to("vdev:2")'),
    "linear_double_on_2": dict(make="nn.Linear(4, 3)", input="torch.randn(2, 4)", source=2, target=2,
                               move=".double()"),
}


@pytest.mark.parametrize("case", list(_CASES))
def test_a_move_under_a_live_graph_is_refused_until_the_graph_is_dropped(case):
    result = run_python(_SCRIPT.format(**_CASES[case]), timeout=120)
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert result.stdout.splitlines() == [
        "before backward refused", "backward ok", "after backward refused", "moved after del"]
