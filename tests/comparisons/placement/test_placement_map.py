"""placement_of / PlacementMap: records for torch replicas and JAX pytrees, and diffs that catch misplacement."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from torch import nn

import dp_jax
import dp_torch
from comparisons.placement import PlacementMap, PlacementRecord, placement_of


def small_torch_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 5), nn.BatchNorm1d(5), nn.Linear(5, 2))


def small_flax_variables(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {"params": {"Dense_0": {"kernel": jnp.asarray(rng.normal(size=(3, 5)), jnp.float32),
                                   "bias": jnp.zeros(5)}},
            "batch_stats": {"BatchNorm_0": {"mean": jnp.zeros(5), "var": jnp.ones(5)}}}


@pytest.mark.parametrize("n", [1, 2, 4])
def test_torch_replicas_get_one_record_per_param_and_buffer_on_their_logical_device(n):
    model = small_torch_model(seed=n)
    replicas = dp_torch.replicate(model, ["cpu"] * n)
    placement = placement_of(replicas, ["cpu"] * n, original=model)
    names = [name for name, _ in model.named_parameters()] + [b for b, _ in model.named_buffers()]
    assert len(placement) == n * len(names)
    for replica, records in placement.by_replica().items():
        assert sorted(r.path for r in records) == sorted(names)
        assert {r.logical_index for r in records} == {replica}
        assert {r.device for r in records} == {"cpu"}
    weight = next(r for r in placement if r.replica == 0 and r.path == "0.weight")
    assert (weight.role, weight.shape, weight.dtype) == ("param", (5, 3), "float32")


def test_torch_replica_0_aliases_the_original_and_the_others_do_not():
    model = small_torch_model(seed=3)
    placement = placement_of(dp_torch.replicate(model, ["cpu"] * 3), ["cpu"] * 3, original=model)
    assert {r.aliases_original for r in placement if r.replica == 0} == {True}
    assert {r.aliases_original for r in placement if r.replica != 0} == {False}


def test_torch_original_module_records_params_buffers_and_grads_without_a_replica():
    model = small_torch_model(seed=4)
    model(torch.randn(6, 3)).sum().backward()
    placement = placement_of(model)
    assert {r.replica for r in placement} == {None}
    roles = {r.role for r in placement}
    assert roles == {"param", "buffer", "grad"}
    assert len(placement.filter(role="grad")) == len(list(model.parameters()))
    assert {r.logical_index for r in placement} == {None}


def test_torch_scattered_inputs_are_per_replica_with_torch_chunk_shapes():
    x = torch.randn(10, 3)
    chunks = dp_torch.scatter((x,), ["cpu"] * 4)
    placement = placement_of(chunks, ["cpu"] * 4, role="input", name="args", per_replica=True)
    assert [(r.replica, r.path, r.shape[0]) for r in placement] == [
        (0, "args.0", 3), (1, "args.0", 3), (2, "args.0", 3), (3, "args.0", 1)]


def test_nested_output_paths_name_the_container_keys():
    out = {"logits": torch.ones(2, 3), "aux": [torch.zeros(2)]}
    paths = {r.path for r in placement_of(out, role="output", name="out")}
    assert paths == {"out.logits", "out.aux.0"}


@pytest.mark.parametrize("n", [1, 3, 4])
def test_jax_replicas_are_committed_to_their_devices_and_replica_0_aliases(n):
    variables = small_flax_variables(seed=n)
    devices = jax.devices()[:n]
    replicas = dp_jax.replicate(variables, devices)
    placement = placement_of(replicas, devices, original=variables, per_replica=True)
    assert len(placement) == 4 * n
    for record in placement:
        assert record.device == f"cpu:{devices[record.replica].id}"
        assert record.logical_index == record.replica
        assert record.aliases_original == (record.replica == 0)
    roles = {r.path: r.role for r in placement}
    assert roles["params.Dense_0.kernel"] == "param"
    assert roles["batch_stats.BatchNorm_0.mean"] == "buffer"


def test_jax_sharded_array_gives_one_record_per_shard():
    devices = jax.devices()[:4]
    mesh = jax.sharding.Mesh(np.array(devices), ("data",))
    x = jax.device_put(np.arange(24.0).reshape(8, 3),
                       jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data")))
    placement = placement_of({"x": x}, devices, role="input", name="args")
    assert [(r.replica, r.logical_index, r.shape) for r in placement] == [
        (i, i, (2, 3)) for i in range(4)]


def test_logical_index_follows_the_device_list_order_not_device_ids():
    devices = jax.devices()[:3][::-1]
    placement = placement_of([jax.device_put(jnp.ones(2), d) for d in devices], devices,
                             role="input", name="x", per_replica=True)
    assert [(r.device, r.logical_index) for r in placement] == [
        (f"cpu:{d.id}", i) for i, d in enumerate(devices)]


def test_diff_of_equal_placements_is_empty_through_the_name_map():
    torch_map = PlacementMap((PlacementRecord(1, "fc.weight", "param", "cpu", 1, (4, 3), "float32"),))
    jax_map = PlacementMap((PlacementRecord(1, "params.fc.kernel", "param", "cpu:1", 1, (3, 4),
                                            "float32"),))
    assert torch_map.diff(jax_map, {"fc.weight": "params.fc.kernel"}) == []
    assert [d.field for d in torch_map.diff(jax_map)] == ["present", "present"]


def test_diff_catches_a_torch_replica_parameter_moved_to_another_device():
    model = small_torch_model(seed=5)
    good = placement_of(dp_torch.replicate(model, ["cpu"] * 3), ["cpu"] * 3, original=model)
    replicas = dp_torch.replicate(model, ["cpu"] * 3)
    replicas[2][0].weight = replicas[2][0].weight.detach().to("meta")
    differences = good.diff(placement_of(replicas, ["cpu"] * 3, original=model))
    assert [(d.replica, d.path, d.field, d.mine, d.theirs) for d in differences] == [
        (2, "0.weight", "logical_index", 2, None)]


def test_diff_catches_a_torch_replica_sharing_the_originals_memory():
    model = small_torch_model(seed=8)
    good = placement_of(dp_torch.replicate(model, ["cpu"] * 3), ["cpu"] * 3, original=model)
    replicas = dp_torch.replicate(model, ["cpu"] * 3)
    replicas[1][2].bias = replicas[0][2].bias
    differences = good.diff(placement_of(replicas, ["cpu"] * 3, original=model))
    assert [(d.replica, d.path, d.field, d.mine, d.theirs) for d in differences] == [
        (1, "2.bias", "aliases_original", False, True)]


def test_diff_catches_a_jax_leaf_put_on_the_wrong_device():
    variables = small_flax_variables(seed=6)
    devices = jax.devices()[:4]
    replicas = dp_jax.replicate(variables, devices)
    good = placement_of(replicas, devices, per_replica=True)
    replicas[3] = jax.tree_util.tree_map(lambda a: a, replicas[3])
    replicas[3]["params"]["Dense_0"]["bias"] = jax.device_put(replicas[3]["params"]["Dense_0"]["bias"],
                                                              devices[1])
    differences = good.diff(placement_of(replicas, devices, per_replica=True))
    assert [(d.replica, d.path, d.field, d.mine, d.theirs) for d in differences] == [
        (3, "params.Dense_0.bias", "logical_index", 3, 1)]
    assert "replica 3 param params.Dense_0.bias: logical_index 3 != 1" in str(differences[0])


def test_diff_skips_paths_mapped_to_none_on_both_sides():
    mine = PlacementMap((PlacementRecord(0, "bn.num_batches_tracked", "buffer", "cpu", 0, (), "int64"),))
    assert mine.diff(PlacementMap(()), {"bn.num_batches_tracked": None}) == []


def test_json_round_trip_and_grid():
    model = small_torch_model(seed=7)
    placement = placement_of(dp_torch.replicate(model, ["cpu"] * 2), ["cpu"] * 2, original=model)
    assert PlacementMap.from_rows(json.loads(placement.to_json())) == placement
    columns, tensors, cells = placement.grid()
    assert columns == [(0, "cpu"), (1, "cpu")]  # the CPU repeated: one column per list position
    assert ("param", "0.weight") in tensors
    assert [r.replica for r in cells[(1, "cpu", "param", "0.weight")]] == [1]


def test_bad_arguments_name_the_argument():
    with pytest.raises(TypeError, match="placement_of: obj of type int"):
        placement_of(3)
    with pytest.raises(ValueError, match="role='weights' is not one of"):
        placement_of(torch.ones(1), role="weights")


VIRTUAL_UNDER_ANOTHER_NAME = """
import torch
import dp_torch
from dp_torch import virtual
from comparisons.placement import virtual_device_type
from comparisons.placement import placement_of

before = virtual_device_type()
devices = virtual.install(3, name="{name}")
model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2)).to(devices[0])
replicas = dp_torch.replicate(model, devices)
placement = placement_of(replicas, devices=devices, original=model)
print(before, virtual_device_type(),
      sorted({{(r.replica, r.aliases_original) for r in placement if r.role in ("param", "buffer")}}))
"""


def test_aliasing_on_virtual_devices_follows_the_name_they_were_installed_under():
    # install() is process-global and first-wins, so a fresh interpreter gets the non-default name.
    code = VIRTUAL_UNDER_ANOTHER_NAME.format(name="vxq")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                            cwd=Path(__file__).resolve().parents[3])
    assert result.returncode == 0, result.stderr
    assert result.stdout.split(" ", 2) == ["None", "vxq", "[(0, True), (1, False), (2, False)]\n"]
