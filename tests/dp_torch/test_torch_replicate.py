"""dp_torch.replicate: aliasing of replica 0, real copies elsewhere, module tree wiring, gradient flow."""
from __future__ import annotations

import pytest
import torch
from _helpers_torch import ScaledByBuffer, TiedLM, cpus, mlp
from torch import nn

import dp_torch


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


@pytest.mark.parametrize("seed", [0, 1])
def test_replica_0_params_share_storage_and_others_are_copies(seed):
    net = mlp(seed, batchnorm=True)
    replicas = dp_torch.replicate(net, cpus(3))
    original = net[0].weight
    assert replicas[0][0].weight._base is original and _storage(replicas[0][0].weight) == _storage(original)
    for replica in replicas[1:]:
        copy = replica[0].weight
        assert _storage(copy) != _storage(original) and torch.equal(copy, original)


def test_with_grad_enabled_replicas_hold_non_leaf_tensors_and_report_no_parameters():
    net = mlp(0)
    for replica in dp_torch.replicate(net, cpus(2)):
        assert list(replica.parameters()) == []
        weight = replica[0].weight
        assert not isinstance(weight, nn.Parameter) and weight.grad_fn is not None
        assert replica[0]._former_parameters["weight"] is weight
        assert replica._is_replica


def test_detach_gives_replica_0_the_original_parameter_objects():
    net = mlp(0)
    replicas = dp_torch.replicate(net, cpus(3), detach=True)
    assert replicas[0][0].weight is net[0].weight
    assert len(list(replicas[0].parameters())) == len(list(net.parameters()))
    assert not replicas[1][0].weight.requires_grad and list(replicas[1].parameters()) == []


def test_buffers_not_requiring_grad_are_the_same_objects_on_replica_0_only():
    net = mlp(0, batchnorm=True)
    replicas = dp_torch.replicate(net, cpus(2))
    assert replicas[0][1].running_mean is net[1].running_mean
    assert replicas[1][1].running_mean is not net[1].running_mean
    assert "running_mean" in replicas[1][1]._buffers  # still a registered buffer


def test_in_place_buffer_update_on_replica_1_leaves_the_original_alone():
    net = mlp(0, batchnorm=True)
    replicas = dp_torch.replicate(net, cpus(2))
    replicas[1][1].running_mean.add_(1.0)
    replicas[0][1].running_var.add_(1.0)
    assert torch.equal(net[1].running_mean, torch.zeros(8))
    assert torch.equal(net[1].running_var, torch.full((8,), 2.0))


def test_tied_weights_stay_tied_in_every_replica():
    for replica in dp_torch.replicate(TiedLM(), cpus(3)):
        assert replica.head.weight is replica.embed.weight


def test_a_child_shared_under_two_names_stays_one_module_per_replica():
    shared = nn.Linear(2, 2)
    net = nn.ModuleDict({"a": shared, "b": shared})
    replicas = dp_torch.replicate(net, cpus(2))
    assert replicas[0]["a"] is replicas[0]["b"] and replicas[1]["a"] is replicas[1]["b"]
    assert replicas[0]["a"] is not replicas[1]["a"] and replicas[0]["a"] is not shared


def test_non_parameter_attributes_are_shared_by_reference_and_none_slots_stay_none():
    net = nn.Linear(2, 2, bias=False)
    net.history = []
    replicas = dp_torch.replicate(net, cpus(2))
    assert all(r.history is net.history and r.bias is None for r in replicas)


def test_replica_zero_grad_warns_like_pytorch():
    replica = dp_torch.replicate(mlp(0), cpus(2))[1]
    with pytest.warns(UserWarning, match=r"zero_grad\(\) from a module created with nn.DataParallel"):
        replica.zero_grad()


def test_gradients_of_all_replicas_sum_onto_the_original_parameters():
    net = mlp(3)
    x = torch.randn(4, 5)
    replicas = dp_torch.replicate(net, cpus(3))
    sum(r(x).sum() for r in replicas).backward()
    expected = torch.autograd.grad(net(x).sum() * 3, net[0].weight)[0]
    torch.testing.assert_close(net[0].weight.grad, expected)


def test_tied_weight_gradient_is_the_sum_over_both_uses_and_replicas():
    net, tokens = TiedLM(), torch.tensor([[1, 2], [3, 4]])
    replicas = dp_torch.replicate(net, cpus(2))
    sum(r(tokens).pow(2).sum() for r in replicas).backward()
    expected = torch.autograd.grad(net(tokens).pow(2).sum() * 2, net.embed.weight)[0]
    torch.testing.assert_close(net.embed.weight.grad, expected)


def test_buffers_requiring_grad_receive_summed_gradients():
    net, x = ScaledByBuffer(), torch.randn(4, 3)
    replicas = dp_torch.replicate(net, cpus(2))
    (replicas[0](x[:2]).sum() + replicas[1](x[2:]).sum()).backward()
    torch.testing.assert_close(net.scale.grad, net.linear(x).detach().sum(0))


def test_frozen_parameters_stay_frozen_in_replicas():
    net = mlp(0)
    net[0].weight.requires_grad_(False)
    for replica in dp_torch.replicate(net, cpus(2)):
        assert not replica[0].weight.requires_grad and replica[0].bias.requires_grad
    assert not net[0].weight.requires_grad


def test_double_backward_through_replicas():
    net, x = nn.Linear(3, 1), torch.randn(4, 3)
    replicas = dp_torch.replicate(net, cpus(2))
    out = sum(r(x).pow(3).sum() for r in replicas)
    (g,) = torch.autograd.grad(out, net.weight, create_graph=True)
    (gg,) = torch.autograd.grad(g.sum(), net.weight)
    ref = nn.Linear(3, 1)
    ref.load_state_dict(net.state_dict())
    (g_ref,) = torch.autograd.grad(ref(x).pow(3).sum() * 2, ref.weight, create_graph=True)
    (gg_ref,) = torch.autograd.grad(g_ref.sum(), ref.weight)
    torch.testing.assert_close(g, g_ref)
    torch.testing.assert_close(gg, gg_ref)


def test_replicate_to_no_devices_returns_no_replicas():
    assert dp_torch.replicate(mlp(0), []) == []


def test_replicate_of_a_module_off_devices_0_names_the_tensor_and_the_fix():
    with pytest.raises(RuntimeError, match=r"replicate: 0.weight is on meta but devices\[0\] is cpu"):
        dp_torch.replicate(mlp(0).to("meta"), ["cpu", "cpu"])
