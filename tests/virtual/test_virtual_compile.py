"""torch.compile and vdev: refused at the first call, naming vdev and the ways out."""
import pytest
import torch
from _helpers_virtual import on_device, vdev
from torch import nn

REFUSAL = r"torch\.compile cannot trace vdev:{i} tensors.*without torch\.compile.*on the CPU"


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _mlp(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))


def _assert_refused(call, index: int) -> None:
    with pytest.raises(RuntimeError, match=REFUSAL.format(i=index)) as caught:
        call()
    assert type(caught.value).__name__ != "InternalTorchDynamoError"


@pytest.mark.parametrize("backend", ["eager", "inductor"])
@pytest.mark.parametrize("index", [0, 2])
def test_a_compiled_module_on_vdev_is_refused_at_its_first_call_and_every_later_one(backend, index):
    compiled = torch.compile(on_device(_mlp(index), vdev(index)), backend=backend)
    x = torch.randn(5, 3, device=vdev(index))
    _assert_refused(lambda: compiled(x), index)
    _assert_refused(lambda: compiled(x), index)  # no silent fall-back to eager either


def test_module_compile_in_place_and_a_compiled_function_of_vdev_inputs_are_refused_too():
    model = on_device(_mlp(1), vdev(3))
    model.compile(backend="eager")
    _assert_refused(lambda: model(torch.randn(2, 3, device=vdev(3))), 3)

    @torch.compile(backend="eager", fullgraph=True)
    def double(t):
        return t * 2

    _assert_refused(lambda: double(torch.arange(3.0, device=vdev(1))), 1)


def test_after_a_refusal_eager_vdev_and_compiled_cpu_give_the_same_outputs():
    cpu_model = _mlp(4)
    model = on_device(cpu_model, vdev(1))
    x = torch.randn(6, 3)
    compiled = torch.compile(model, backend="eager")
    _assert_refused(lambda: compiled(x.to(vdev(1))), 1)
    eager_out = model(x.to(vdev(1)))                                 # way out 1: no compile
    compiled_cpu_out = torch.compile(cpu_model, backend="eager")(x)  # way out 2: compile on CPU
    assert eager_out.device == vdev(1)
    torch.testing.assert_close(eager_out.cpu(), compiled_cpu_out)
