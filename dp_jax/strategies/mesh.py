"""The one-axis device mesh the mapped strategies run on, and the PartitionSpec that shards one axis."""
from __future__ import annotations

import jax
import numpy as np
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

from dp_jax._caches import module_cache

REPLICA_AXIS = "replicas"  # the mesh axis name when the caller binds none (axis_name=None)


@module_cache(maxsize=64)
def mesh_of(devices: tuple[jax.Device, ...], name: str) -> Mesh:
    """A 1-D mesh over `devices` with axis `name` (cached: equal arguments give the same Mesh)."""
    return Mesh(np.array(devices), (name,), axis_types=(AxisType.Auto,))


def spec_at(axis: int, name: str) -> P:
    """PartitionSpec that shards `axis` over the mesh axis `name` and replicates the rest."""
    return P(*([None] * axis), name)
