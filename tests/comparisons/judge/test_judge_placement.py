"""Placement verdicts torch vs JAX through a pair's layer mapping, and the aliasing verdict."""
from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest
import torch

import dp_jax
import dp_torch
from comparisons import models
from comparisons.judge import check_aliasing, compare_placement
from comparisons.placement import PlacementMap, placement_of


def placements(n: int, seed: int, move: tuple[int, str] | None = None):
    """torch and JAX placement maps of the mlp pair's replicas and input chunks on n devices."""
    pair = models.get("mlp")
    torch_module, _, variables = pair.build(seed=seed)
    devices = jax.devices()[:n]
    variables = jax.device_put(variables, devices[0])
    replicas = dp_jax.replicate(variables, devices)
    if move is not None:
        replica, layer = move
        replicas[replica]["params"][layer]["bias"] = jax.device_put(
            replicas[replica]["params"][layer]["bias"], devices[(replica + 1) % n])
    x, _ = pair.make_inputs(2 * n, seed, np.float32)
    torch_map = (placement_of(dp_torch.replicate(torch_module, ["cpu"] * n), ["cpu"] * n, original=torch_module)
                 + placement_of(dp_torch.scatter(tuple(map(torch.from_numpy, x)), ["cpu"] * n), ["cpu"] * n,
                                role="input", name="args", per_replica=True))
    jax_map = (placement_of(replicas, devices, original=variables, per_replica=True)
               + placement_of(dp_jax.scatter(x, devices), devices, role="input", name="args", per_replica=True))
    return pair, torch_map, jax_map


@pytest.mark.parametrize("n", [2, 3])
def test_faithful_replicas_agree_layer_by_layer(n):
    pair, torch_map, jax_map = placements(n, seed=n)
    check = compare_placement(pair, torch_map, jax_map, "jax:explicit")
    assert check.passed, check.detail
    assert check_aliasing(torch_map, "torch").passed and check_aliasing(jax_map, "jax").passed


@pytest.mark.parametrize("replica, layer", [(1, "fc2"), (2, "out")])
def test_a_jax_bias_on_the_wrong_device_fails_the_placement_verdict(replica, layer):
    pair, torch_map, jax_map = placements(3, seed=replica, move=(replica, layer))
    check = compare_placement(pair, torch_map, jax_map, "jax:explicit")
    assert not check.passed
    # -1: the layer's tensors on this replica are spread over several devices
    assert f"replica {replica} param params.{layer}: logical_index {replica} != -1" in check.detail


def test_a_replica_that_aliases_the_original_fails_the_aliasing_verdict():
    pair, _, jax_map = placements(2, seed=5)
    wrong = PlacementMap(tuple(dataclasses.replace(r, aliases_original=True) for r in jax_map))
    check = check_aliasing(wrong, "jax:explicit")
    assert not check.passed and "replica 1" in check.detail


@pytest.mark.parametrize("n, replica, layer", [(2, 0, "fc1"), (3, 1, "out"), (3, 2, "fc2")])
def test_aliasing_that_differs_from_torch_fails_the_placement_verdict_itself(n, replica, layer):
    pair, torch_map, jax_map = placements(n, seed=11 + replica)
    flipped = not (replica == 0)  # replica 0 should share the original's memory, the others copy
    wrong = PlacementMap(tuple(
        dataclasses.replace(r, aliases_original=flipped)
        if r.replica == replica and r.role == "param" and r.path.startswith(f"params.{layer}.") else r
        for r in jax_map))
    changed = [(a, b) for a, b in zip(jax_map, wrong) if a != b]
    assert changed and all(dataclasses.replace(b, aliases_original=a.aliases_original) == a for a, b in changed)
    check = compare_placement(pair, torch_map, wrong, "jax:explicit")
    assert not check.passed
    assert f"replica {replica} param params.{layer}: aliases_original {not flipped} != {flipped}" in check.detail


@pytest.mark.parametrize("n", [2, 3])
def test_only_the_padded_replicas_input_may_differ_in_size(n):
    pair, torch_map, jax_map = placements(n, seed=7 + n)
    last = n - 1
    padded = PlacementMap(tuple(dataclasses.replace(r, shape=(r.shape[0] + 2, *r.shape[1:]))
                                if r.role == "input" and r.replica == last else r for r in jax_map))
    assert compare_placement(pair, torch_map, padded, "jax:sharded", padded_replica=last).passed
    check = compare_placement(pair, torch_map, padded, "jax:sharded")
    assert not check.passed and f"replica {last} input args.0: size" in check.detail
    assert not compare_placement(pair, torch_map, padded, "jax:sharded", padded_replica=0).passed


@pytest.mark.parametrize("n", [2, 3])
def test_a_replica_0_layer_with_one_tensor_shared_and_one_copied_fails_both_verdicts(n):
    # real arrays: replica 0's kernel stays the original's memory, its bias becomes a copy on the same device
    pair, torch_map, _ = placements(n, seed=17 + n)
    _, _, variables = pair.build(seed=17 + n)
    devices = jax.devices()[:n]
    variables = jax.device_put(variables, devices[0])
    replicas = dp_jax.replicate(variables, devices)
    layer = sorted(variables["params"])[n % len(variables["params"])]
    replicas[0]["params"][layer]["bias"] = jax.device_put(np.array(variables["params"][layer]["bias"]), devices[0])
    jax_map = placement_of(replicas, devices, original=variables, per_replica=True)
    records = {r.path: r.aliases_original for r in jax_map if r.replica == 0}
    assert records[f"params.{layer}.kernel"] is True and records[f"params.{layer}.bias"] is False
    torch_replicas = PlacementMap(tuple(r for r in torch_map if r.role != "input"))  # this jax_map has no inputs
    placement = compare_placement(pair, torch_replicas, jax_map, "jax:explicit")
    assert not placement.passed  # the layer as a whole does not share replica 0's memory as torch's does
    assert f"replica 0 param params.{layer}: aliases_original True != False" in placement.detail
    aliasing = check_aliasing(jax_map, "jax:explicit")
    assert not aliasing.passed and f"replica 0 params.{layer}.bias: aliases_original=False" in aliasing.detail


def test_a_later_replica_whose_weight_shares_the_originals_memory_fails_the_aliasing_verdict():
    torch.manual_seed(int(np.random.default_rng().integers(1000)))
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    replicas = dp_torch.replicate(model, ["cpu"] * 3)
    replicas[2][0].weight = model[0].weight  # shares; its bias stays replicate's copy
    placement = placement_of(replicas, ["cpu"] * 3, original=model)
    check = check_aliasing(placement, "torch")
    assert not check.passed and check.detail == "replica 2 0.weight: aliases_original=True"
