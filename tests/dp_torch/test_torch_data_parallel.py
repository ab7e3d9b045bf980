"""dp_torch.DataParallel / data_parallel end to end on N CPU replicas, against single-device torch."""
from __future__ import annotations

import pytest
import torch
from _helpers_torch import ScaledByBuffer, TiedLM, assert_same_grads, cpus, mlp, twin
from torch import nn

import dp_torch


@pytest.mark.parametrize(("seed", "batch", "n_devices"), [(0, 8, 2), (1, 5, 4), (2, 13, 3), (3, 1, 3)])
def test_outputs_and_gradients_match_the_module_on_the_full_batch(seed, batch, n_devices):
    net = mlp(seed)
    ref = twin(net)
    x, target = torch.randn(batch, 5), torch.randn(batch, 3)
    out = dp_torch.DataParallel(net, cpus(n_devices))(x)
    nn.functional.mse_loss(out, target).backward()
    nn.functional.mse_loss(ref(x), target).backward()
    torch.testing.assert_close(out, ref(x))
    assert_same_grads(net, ref)


def test_batch_of_5_on_4_devices_uses_3_replicas():
    calls = []
    net = nn.Linear(2, 2)
    net.register_forward_hook(lambda m, args, out: calls.append(args[0].shape[0]))
    out = dp_torch.DataParallel(net, cpus(4))(torch.randn(5, 2))
    assert sorted(calls) == [1, 2, 2] and out.shape == (5, 2)


def test_batchnorm_running_stats_equal_the_update_from_chunk_0_only():
    net = mlp(4, batchnorm=True)
    ref = twin(net)
    x = torch.randn(9, 5)
    dp_torch.DataParallel(net, cpus(3))(x)
    ref(x[:3])
    torch.testing.assert_close(net[1].running_mean, ref[1].running_mean)
    torch.testing.assert_close(net[1].running_var, ref[1].running_var)
    assert net[1].num_batches_tracked.item() == 1


def test_under_no_grad_replica_0_runs_on_the_original_parameters():
    seen = []
    net = nn.Linear(2, 2)
    net.register_forward_pre_hook(lambda m, args: seen.append(m.weight))
    with torch.no_grad():
        dp_torch.DataParallel(net, cpus(2))(torch.randn(4, 2))
    assert any(w is net.weight for w in seen)


def test_tied_weights_get_single_device_gradients():
    net = TiedLM()
    ref = twin(net)
    tokens = torch.randint(0, 7, (6, 3))
    dp_torch.DataParallel(net, cpus(3))(tokens).square().mean().backward()
    ref(tokens).square().mean().backward()
    assert_same_grads(net, ref)


def test_buffers_requiring_grad_get_single_device_gradients():
    net = ScaledByBuffer()
    ref = twin(net)
    x = torch.randn(7, 3)
    dp_torch.DataParallel(net, cpus(2))(x).sum().backward()
    ref(x).sum().backward()
    torch.testing.assert_close(net.scale.grad, ref.scale.grad)


def test_frozen_parameters_stay_without_gradient():
    net = mlp(5)
    net[0].requires_grad_(False)
    dp_torch.DataParallel(net, cpus(2))(torch.randn(4, 5)).sum().backward()
    assert net[0].weight.grad is None and net[3].weight.grad is not None


def test_double_backward_matches_single_device():
    net = mlp(6)
    ref = twin(net)
    x = torch.randn(6, 5)
    grads = torch.autograd.grad(dp_torch.DataParallel(net, cpus(3))(x).pow(2).sum(), net[0].weight, create_graph=True)
    ref_grads = torch.autograd.grad(ref(x).pow(2).sum(), ref[0].weight, create_graph=True)
    torch.testing.assert_close(grads[0], ref_grads[0])
    torch.testing.assert_close(
        torch.autograd.grad(grads[0].sum(), net[3].weight)[0], torch.autograd.grad(ref_grads[0].sum(), ref[3].weight)[0]
    )


def test_kwargs_dim_and_output_device():
    class Masked(nn.Module):
        def forward(self, x, mask=None, scale=1.0):
            return x * mask * scale

    x, mask = torch.randn(3, 6), torch.randn(3, 6)
    out = dp_torch.DataParallel(Masked(), cpus(3), output_device="cpu", dim=1)(x, mask=mask, scale=2.0)
    torch.testing.assert_close(out, x * mask * 2.0)


def test_no_inputs_run_one_replica():
    class Constant(nn.Module):
        def forward(self):
            return torch.ones(2)

    assert dp_torch.DataParallel(Constant(), cpus(3))().shape == (2,)


def test_single_device_calls_the_module_itself_without_gather():
    net = nn.Linear(2, 2)
    seen = []
    net.register_forward_pre_hook(lambda m, args: seen.append(m))
    dp_torch.DataParallel(net, ["cpu"])(torch.randn(3, 2))
    assert seen == [net]


def test_scalar_outputs_become_one_entry_per_replica_with_pytorchs_warning():
    class MeanLoss(nn.Module):
        def forward(self, x):
            return x.mean()

    with pytest.warns(UserWarning, match="all input tensors were scalars"):
        out = dp_torch.DataParallel(MeanLoss(), cpus(4))(torch.randn(5, 2))
    assert out.shape == (3,)


def test_state_dict_keys_are_prefixed_with_module():
    wrapper = dp_torch.DataParallel(nn.Linear(2, 2), cpus(2))
    assert sorted(wrapper.state_dict()) == ["module.bias", "module.weight"]
    assert wrapper.device_ids == [torch.device("cpu")] * 2 and wrapper.output_device == torch.device("cpu")


def test_user_inputs_are_not_modified():
    net = mlp(7, batchnorm=True)
    x = torch.randn(6, 5)
    args = [x]
    before = x.clone()
    dp_torch.DataParallel(nn.Sequential(), cpus(3))(args)
    dp_torch.DataParallel(net, cpus(3))(x)
    assert args == [x] and torch.equal(x, before)


def test_functional_data_parallel_matches_the_module():
    net = mlp(8)
    x = torch.randn(7, 5)
    torch.testing.assert_close(dp_torch.data_parallel(net, x, cpus(3)), net(x))


def test_functional_data_parallel_replicates_with_autograd_even_under_no_grad():
    seen = []
    net = nn.Linear(2, 2)
    net.register_forward_pre_hook(lambda m, args: seen.append(m.weight))
    with torch.no_grad():
        dp_torch.data_parallel(net, torch.randn(4, 2), cpus(2))
    assert all(not isinstance(w, nn.Parameter) for w in seen)


@pytest.mark.parametrize("factory", [dp_torch.DataParallel, lambda m, ids: dp_torch.data_parallel(m, None, ids)])
def test_empty_device_ids_is_an_error(factory):
    with pytest.raises(ValueError, match="device_ids is empty"):
        factory(nn.Linear(1, 1), [])


def test_device_that_does_not_exist_is_an_error_naming_it():
    missing = f"cuda:{torch.cuda.device_count() + 3}"
    absent = "which does not exist" if torch.cuda.is_available() else "but this machine has no cuda device"
    with pytest.raises(ValueError, match=rf"device_ids\[1\]='{missing}' names {missing}, {absent}"):
        dp_torch.DataParallel(nn.Linear(1, 1), ["cpu", missing])


@pytest.mark.skipif(torch.accelerator.is_available(), reason="ints are accelerator indices here")
def test_integer_device_ids_without_an_accelerator_are_an_error_suggesting_cpu():
    with pytest.raises(ValueError, match=r"device_ids\[0\]=0 is an accelerator index.*pass 'cpu'"):
        dp_torch.DataParallel(nn.Linear(1, 1), [0, 1])


def test_module_off_device_ids_0_is_an_error_with_pytorchs_text():
    wrapper = dp_torch.DataParallel(nn.Linear(2, 2).to("meta"), ["cpu", "cpu"])
    expected = r"module must have its parameters and buffers on device cpu \(device_ids\[0\]\) but found one of them"
    with pytest.raises(RuntimeError, match=expected + " on device: meta"):
        wrapper(torch.randn(2, 2))


def test_a_replica_that_raises_is_reported_with_its_index():
    class FailsOnSmallChunks(nn.Module):
        def forward(self, x):
            if x.shape[0] < 2:
                raise ValueError("chunk too small")
            return x

    with pytest.raises(ValueError, match=r"Caught ValueError in replica 2 on device cpu"):
        dp_torch.DataParallel(FailsOnSmallChunks(), cpus(3))(torch.randn(5, 1))
