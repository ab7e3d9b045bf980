"""Device arguments: normalise user spellings to `jax.Device`s and say clearly what is wrong.

Shared by the pipeline steps and the strategies. A device may be given as a `jax.Device`, an int
index into `jax.devices()`, or (for a gather target only) the literal "cpu", as torch allows.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from dp_jax._errors import UsageError, UsageTypeError

DeviceLike = jax.Device | int


def device_label(device: jax.Device) -> str:
    """A short name for messages and placement records: "cpu:3", "cuda:1"."""
    return f"{device.platform}:{device.id}"


def resolve_device(device: Any, arg_name: str = "device", *, allow_cpu_literal: bool = False) -> jax.Device:
    """Return the `jax.Device` meant by `device` (a Device, an index into jax.devices(), or "cpu")."""
    if isinstance(device, jax.Device):
        return device
    if allow_cpu_literal and device == "cpu":
        return jax.devices("cpu")[0]
    if isinstance(device, (int, np.integer)) and not isinstance(device, bool):
        available = jax.devices()
        if not 0 <= device < len(available):
            raise UsageError(
                f"{arg_name}={device!r} is out of range: jax.devices() has {len(available)} devices "
                f"({', '.join(device_label(d) for d in available)}); pass an index in "
                f"0..{len(available) - 1} or a jax.Device"
            )
        return available[int(device)]
    spelled = "a jax.Device, an int index into jax.devices()" + (' or "cpu"' if allow_cpu_literal else "")
    raise UsageTypeError(f"{arg_name}={device!r} is not a device; pass {spelled}")


def resolve_devices(devices: Any, arg_name: str = "devices") -> list[jax.Device]:
    """Return a non-empty list of `jax.Device`s from a sequence of Devices or indices.

    Repeats are allowed (several replicas on one device, like torch's N replicas on `cpu`).
    """
    if isinstance(devices, np.ndarray):  # e.g. mesh.devices
        devices = devices.ravel().tolist()
    if isinstance(devices, (jax.Device, int, str)) or not isinstance(devices, Sequence):
        raise UsageTypeError(
            f"{arg_name}={devices!r} must be a list of devices, e.g. jax.devices() or [0, 1]"
        )
    if len(devices) == 0:
        raise UsageError(f"{arg_name} is empty; pass at least one device, e.g. jax.devices()")
    return [resolve_device(d, f"{arg_name}[{i}]") for i, d in enumerate(devices)]


def require_distinct(devices: Sequence[jax.Device], arg_name: str = "devices") -> None:
    """Raise if a device repeats (meshes and shardings need each device once)."""
    seen: dict[jax.Device, int] = {}
    for i, device in enumerate(devices):
        if device in seen:
            raise UsageError(
                f"{arg_name}[{i}]={device_label(device)} repeats {arg_name}[{seen[device]}]; "
                "this strategy needs distinct devices (use strategy='explicit' to repeat one)"
            )
        seen[device] = i


def is_concrete_array(leaf: Any) -> bool:
    """True for a materialised `jax.Array` (not a tracer), which knows its placement."""
    return isinstance(leaf, jax.Array) and not isinstance(leaf, jax.core.Tracer)


def committed_device(named_trees: dict[str, Any]) -> jax.Device | None:
    """The one device that the committed arrays of the named trees live on; None if none is committed.

    Raises, naming both leaves, when committed arrays sit on different devices: one replica and its
    inputs must live on one device. Tracers are skipped (they carry no placement).
    """
    found: tuple[str, jax.Device] | None = None
    for name, tree in named_trees.items():
        for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
            if not (is_concrete_array(leaf) and leaf.committed):
                continue
            where = name + jax.tree_util.keystr(path)
            if len(leaf.devices()) != 1:
                raise UsageError(f"{where} is spread over {len(leaf.devices())} devices; expected one")
            (device,) = leaf.devices()
            if found is None:
                found = (where, device)
            elif device != found[1]:
                raise UsageError(
                    f"{where} is on {device_label(device)} but {found[0]} is on {device_label(found[1])}; "
                    "a replica and its inputs must live on one device (see dp_jax.replicate, scatter)"
                )
    return None if found is None else found[1]


def is_array_leaf(leaf: Any) -> bool:
    """True for the leaves the pipeline places and splits: JAX arrays (tracers too) and numpy arrays."""
    return isinstance(leaf, (jax.Array, np.ndarray))


def device_put_apart(tree: Any, target: Any, **device_put_kwargs: Any) -> Any:
    """`jax.device_put(tree, target, **device_put_kwargs)`, its traced leaves sent apart from the others.

    Why: device_put's JVP is linear over all the arrays of one call, so under an eager `jax.grad` a call
    that mixes differentiated leaves (parameters) with constants (BatchNorm statistics) makes a zero
    tangent for every constant, one eager broadcast program per shape and device, for copies nobody
    differentiates. Sent apart: the same arrays on the same devices, and no zeros. Costs one transfer
    call more, only when the tree mixes the two.
    """
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    traced = [isinstance(leaf, jax.core.Tracer) for leaf in leaves]
    if all(traced) or not any(traced):
        return jax.device_put(tree, target, **device_put_kwargs)
    moved = {}
    for kind in (True, False):
        picked = [k for k, is_traced in enumerate(traced) if is_traced == kind]
        moved.update(zip(picked, jax.device_put([leaves[k] for k in picked], target, **device_put_kwargs)))
    return treedef.unflatten([moved[k] for k in range(len(leaves))])
