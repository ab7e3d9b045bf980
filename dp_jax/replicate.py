"""replicate: one committed copy of a variables pytree per device.

The JAX twin of dp_torch/replicate.py. torch rebuilds a module tree around broadcast copies of its
parameters and buffers; in JAX the model is a pure function, so replicating the variables pytree is
the whole job. As in torch, replica 0 aliases the original and the other replicas are copies, and
the copies are differentiable: `jax.grad` through `device_put` sums the replicas' gradients back
onto the original variables' device, as torch's Broadcast backward (ReduceAddCoalesced) does.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax

from dp_jax import nnx
from dp_jax._devices import DeviceLike, device_put_apart, is_array_leaf, is_concrete_array, resolve_devices
from dp_jax._errors import UsageTypeError


def replicate(variables: Any, devices: Sequence[DeviceLike]) -> list[Any]:
    """Copy `variables` to every device; returns one pytree per device, its arrays committed there.

    An NNX module is replicated whole: one module per device, its state committed there, replica
    i's RngKeys `fold_in(key, i)` (dp_jax/nnx.py). A linen Module holds no variables and is refused.

    Transfers each array (no compile). Replica 0 reuses the original arrays that are already
    committed to devices[0] (the same objects) and the buffers of uncommitted ones that live there;
    replicas 1.. are fresh copies of replica 0, even on a repeated device. Non-array leaves are
    shared by reference.
    """
    devices = resolve_devices(devices)
    if nnx.is_nnx_module(variables):
        return _replicate_module(variables, devices)
    if nnx.is_linen_module(variables):
        raise UsageTypeError(f"replicate got a linen Module ({type(variables).__name__}), which holds no arrays; "
                             "pass its variables (module.init(...)), or an NNX module to get one module per device")
    first = _place_tree(variables, devices[0], fresh_copy=False)
    # The others copy replica 0, as torch broadcasts from device_ids[0]: every replica's gradient
    # then flows back through devices[0]. Copied from an uncommitted source (numpy variables under
    # jax.grad), each replica's gradient would stay on its own device and their sum would fail.
    return [first] + [_place_tree(first, device, fresh_copy=True) for device in devices[1:]]


def _replicate_module(model: Any, devices: list) -> list:
    """One NNX module per device, every Variable (and carried array) of every sub-module committed there.

    Replica i's RngKeys are `fold_in(key, i)` (DataParallel's rule); replica 0's arrays alias the original's
    buffers when they live on devices[0] (as `replicate` of variables), but its Variables are new objects.
    """
    split = nnx.split_module(model, "replicate")
    replica = split.replica_fn.without_keys()
    modules = []
    for i, (variables, device) in enumerate(zip(replicate(split.variables, devices), devices)):
        own_keys = {slot: jax.device_put(jax.random.fold_in(key, i), device) for slot, key in split.keys.items()}
        modules.append(replica.merge(split.replica_fn.leaves(variables, own_keys)))
    return modules


def _place_tree(tree: Any, device: jax.Device, *, fresh_copy: bool) -> Any:
    """`tree` with every array committed to `device` (one batched transfer for the traced leaves, one for
    the others: see device_put_apart)."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    to_move = [
        k for k, leaf in enumerate(leaves)
        if is_array_leaf(leaf) and (fresh_copy or not _committed_to(leaf, device))
    ]
    moved = device_put_apart([leaves[k] for k in to_move], device, may_alias=False if fresh_copy else None)
    for k, array in zip(to_move, moved):
        leaves[k] = array
    return treedef.unflatten(leaves)


def _committed_to(leaf: Any, device: jax.Device) -> bool:
    """True when `leaf` is a concrete array already committed to exactly `device`."""
    return is_concrete_array(leaf) and leaf.committed and leaf.devices() == {device}
