"""The strategies as data: one `Strategy` record per name, and the program each mapped one builds.

Adding a strategy means adding one record here (and, if it maps one program over the replicas,
its program builder); everything else (planning, placing, running, the docs' tables, the
harness and the benchmarks) reads `STRATEGIES` and the record.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from dp_jax._errors import UsageError
from dp_jax.strategies.mesh import mesh_of, spec_at

# replica(variables, arrays, rngs) -> (output, collections): one replica's computation on its shard.
Replica = Callable[[Any, list, Any], tuple[Any, Any]]
# build(replica, axes, devices, axis_name) -> program(variables, arrays, keys) -> stacked (outputs, collections)
ProgramBuilder = Callable[[Replica, tuple[int, ...], tuple[jax.Device, ...], str], Callable[..., Any]]


@dataclasses.dataclass(frozen=True)
class Strategy:
    """How one strategy runs the replicas; the fields are checked, so a misspelt record fails at import.

    Attributes:
      name: the public name ('explicit', 'pmap', ...).
      mapped: True when one program maps over every replica (needs distinct devices and equal
        shards); False for one call per replica.
      stacked: True when the batch reaches the program as a (replica, row) split of `dim`, sharded
        on the replica axis; False when `dim` is sharded as it is (or, unmapped, one chunk per call).
      build: the program builder of a mapped strategy (None for 'explicit').
    """

    name: str
    mapped: bool
    stacked: bool
    build: ProgramBuilder | None

    def __post_init__(self) -> None:
        if not (isinstance(self.mapped, bool) and isinstance(self.stacked, bool)):
            raise TypeError(f"Strategy({self.name!r}): mapped={self.mapped!r} and stacked={self.stacked!r} "
                            "must be bools")
        if self.mapped != (self.build is not None) or (self.stacked and not self.mapped):
            raise ValueError(f"Strategy({self.name!r}): a mapped strategy has a program builder, an unmapped "
                             "one has none and no stacked layout")


def _pmap_program(replica: Replica, axes: tuple[int, ...], devices: tuple[jax.Device, ...], name: str) -> Callable:
    return jax.pmap(replica, axis_name=name, in_axes=(None, list(axes), 0), out_axes=0, devices=list(devices))


def _sharded_program(replica: Replica, axes: tuple[int, ...], devices: tuple[jax.Device, ...], name: str) -> Callable:
    batched = jax.vmap(replica, in_axes=(None, list(axes), 0), out_axes=0, axis_name=name)
    return jax.jit(batched, out_shardings=NamedSharding(mesh_of(devices, name), P(name)))


def _shard_map_program(replica: Replica, axes: tuple[int, ...], devices: tuple[jax.Device, ...],
                       name: str) -> Callable:
    def one_block(variables, arrays, rngs):  # shard_map keeps the size-1 replica axis of rngs and outputs
        rngs = jax.tree.map(lambda k: k[0], rngs)
        return jax.tree.map(lambda leaf: leaf[None], replica(variables, arrays, rngs))

    in_specs = (P(), [spec_at(a, name) for a in axes], P(name))
    # check_vma=False, as jax.pmap's own shard_map: a model written for one device need not type its
    # values as varying (a Flax LSTM's zero carry meets varying inputs in lax.scan). Transpose then
    # psums the cotangent of the P() variables over the replicas: the full-batch gradient.
    mapped = jax.shard_map(one_block, mesh=mesh_of(devices, name), in_specs=in_specs, out_specs=P(name),
                           check_vma=False)
    return jax.jit(mapped)


TABLE: dict[str, Strategy] = {record.name: record for record in (
    Strategy("explicit", mapped=False, stacked=False, build=None),
    Strategy("pmap", mapped=True, stacked=True, build=_pmap_program),
    Strategy("sharded", mapped=True, stacked=True, build=_sharded_program),
    Strategy("shard_map", mapped=True, stacked=False, build=_shard_map_program),
)}
STRATEGIES: tuple[str, ...] = tuple(TABLE)
MAPPED_STRATEGIES: tuple[str, ...] = tuple(name for name, record in TABLE.items() if record.mapped)


def lookup(strategy: str, axis_name: str | None = None) -> Strategy:
    """The record of `strategy`; raises for an unknown name, or an axis_name it cannot bind."""
    record = TABLE.get(strategy) if isinstance(strategy, str) else None
    if record is None:
        raise UsageError(f"strategy={strategy!r} is unknown; pass one of {', '.join(map(repr, STRATEGIES))}")
    if axis_name is not None and not record.mapped:
        raise UsageError(
            f"axis_name={axis_name!r} needs one program over all replicas, but strategy={strategy!r} runs "
            f"each replica as its own call; use strategy={' or '.join(map(repr, MAPPED_STRATEGIES))}"
        )
    return record
