"""Checkpoints of vdev tensors: torch.save writes CPU data, torch.load honours map_location like CUDA."""
import io

import pytest
import torch
from _helpers_virtual import on_device, run_python, vdev
from torch import nn

from dp_torch.virtual import tensor as virtual_tensor


def _checkpoint() -> dict:
    """A state dict from vdev:1 (float weights, BN statistics, an int64 counter), with a
    Parameter on vdev:2 that requires grad and a bfloat16 tensor on vdev:3 beside it."""
    torch.manual_seed(3)
    model = on_device(nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.Linear(6, 2)), vdev(1))
    model(torch.randn(5, 4, device=vdev(1)))  # non-trivial running statistics
    state = dict(model.state_dict())
    state["extra"] = nn.Parameter(torch.randn(3, 2, device=vdev(2)))
    state["half"] = torch.randn(7, device=vdev(3)).to(torch.bfloat16)
    return state


def _saved(state) -> io.BytesIO:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return buffer


def _assert_same_values(loaded: dict, state: dict) -> None:
    assert loaded.keys() == state.keys()
    for key, value in state.items():
        assert loaded[key].dtype == value.dtype, key
        assert torch.equal(loaded[key].cpu(), value.cpu()), key


@pytest.mark.parametrize("weights_only", [True, False])
@pytest.mark.parametrize("map_location", ["cpu", torch.device("cpu"),
                                          {"vdev:1": "cpu", "vdev:2": "cpu", "vdev:3": "cpu"}],
                         ids=["str", "device", "dict"])
def test_map_location_cpu_loads_plain_cpu_tensors_with_the_saved_values(map_location, weights_only):
    state = _checkpoint()
    loaded = torch.load(_saved(state), map_location=map_location, weights_only=weights_only)
    _assert_same_values(loaded, state)
    for key, value in loaded.items():
        assert value.device == torch.device("cpu") and not isinstance(value, virtual_tensor.VTensor), key
    assert isinstance(loaded["extra"], nn.Parameter) and loaded["extra"].requires_grad
    loaded["extra"].sum().backward()  # a CPU leaf like any other
    assert torch.equal(loaded["extra"].grad, torch.ones(3, 2))


def test_without_map_location_each_tensor_comes_back_on_the_device_it_was_saved_from():
    state = _checkpoint()
    loaded = torch.load(_saved(state))
    _assert_same_values(loaded, state)
    assert {key: value.device for key, value in loaded.items()} == {
        key: value.device for key, value in state.items()}
    assert isinstance(loaded["extra"], nn.Parameter) and loaded["extra"].requires_grad


def test_a_whole_module_saved_on_vdev_loads_on_cpu_and_computes_the_same_outputs():
    torch.manual_seed(8)
    model = on_device(nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 2)), vdev(2))
    x = torch.randn(4, 3)
    on_cpu = torch.load(_saved(model), map_location="cpu", weights_only=False)
    assert {p.device for p in on_cpu.parameters()} == {torch.device("cpu")}
    assert all(isinstance(p, nn.Parameter) for p in on_cpu.parameters())
    torch.testing.assert_close(on_cpu(x), model(x.to(vdev(2))).cpu(), rtol=0, atol=0)


def test_a_dict_map_location_moves_only_the_devices_it_names():
    state = _checkpoint()
    loaded = torch.load(_saved(state), map_location={"vdev:1": "vdev:3", "vdev:2": "cpu"})
    _assert_same_values(loaded, state)
    assert loaded["0.weight"].device == vdev(3) and loaded["1.running_mean"].device == vdev(3)
    assert loaded["extra"].device == torch.device("cpu")
    assert loaded["half"].device == vdev(3)  # vdev:3 is not in the dict: it stays


def test_a_callable_map_location_gets_pytorchs_error_for_storage_less_backends():
    state = {"w": torch.arange(4.0, device=vdev(1))}
    with pytest.raises(RuntimeError, match="Callable map_location not supported"):
        torch.load(_saved(state), map_location=lambda storage, location: storage)


def test_a_checkpoint_from_vdev_loads_on_cpu_in_a_process_without_vdev_or_dp_torch(tmp_path):
    state = _checkpoint()
    path = tmp_path / "vdev.pt"
    torch.save(state, path)
    expected = {key: value.cpu() for key, value in state.items()}
    torch.save(expected, tmp_path / "expected.pt")
    result = run_python(f"""
        import sys
        import torch
        loaded = torch.load({str(path)!r}, map_location="cpu")      # weights_only=True
        expected = torch.load({str(tmp_path / "expected.pt")!r})
        assert all(torch.equal(loaded[k], expected[k]) for k in expected)
        assert {{v.device.type for v in loaded.values()}} == {{"cpu"}}
        assert not any(name.startswith("dp_torch") for name in sys.modules)
        print("ok")
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_a_checkpoint_written_by_the_earlier_format_still_loads_and_honours_map_location(monkeypatch):
    monkeypatch.setattr(virtual_tensor.VTensor, "__reduce_ex__", lambda self, protocol: (
        virtual_tensor._rebuild, (self._data, self._index, self.requires_grad)))
    state = {"w": torch.arange(6.0, device=vdev(2)), "p": nn.Parameter(torch.ones(2, device=vdev(1)))}
    buffer = _saved(state)
    monkeypatch.undo()
    on_cpu = torch.load(buffer, map_location="cpu")
    buffer.seek(0)
    as_saved = torch.load(buffer)
    _assert_same_values(on_cpu, state)
    _assert_same_values(as_saved, state)
    assert {v.device for v in on_cpu.values()} == {torch.device("cpu")}
    assert as_saved["w"].device == vdev(2) and as_saved["p"].device == vdev(1)
    assert on_cpu["p"].requires_grad and as_saved["p"].requires_grad
