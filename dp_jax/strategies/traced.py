"""A mapped strategy inside a trace (jax.jit, jax.grad under jit): placement by shardings, not device_puts.

Under a jit trace there are no buffers to commit: the variables are constrained to `P()` (replicated)
on the mesh of `device_ids`, the batch to torch's chunks on the replica axis, and the output to
`P()` (a full copy on every device of the mesh, output_device included: the closest a single
program comes to torch's "gathered on output_device"; `jax.device_put(out, device)` after the jit
commits it to one device).

Chunks are torch's, and no padding row enters a computation. An even batch (`B == n*c`) runs
through the strategy's own program builder; any other batch through the per-device switch program
of switch.py (device i computes a full chunk, the short chunk's rows alone, or nothing: batch 5 on
4 devices leaves device 3 idle). Outputs are gathered without the short chunk's filled rows.
"""
from __future__ import annotations

from typing import Any

import jax
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from dp_jax._devices import require_distinct
from dp_jax._errors import UsageError
from dp_jax._jax_compat import is_abstract_tracer
from dp_jax.scatter_gather import chunk_sizes
from dp_jax.strategies.call import StrategyCall, reduce_collections, replica_keys
from dp_jax.strategies.inputs import split_args
from dp_jax.strategies.mapped import ProgramKey, program_for
from dp_jax.strategies.mesh import mesh_of, spec_at
from dp_jax.strategies.switch import lay_out_slots
from dp_jax.strategies.table import MAPPED_STRATEGIES, Strategy
from dp_jax.strategies.unpad import gather_stacked


def is_traced(*trees: Any) -> bool:
    """True when a leaf is an abstract tracer (a jit trace), not a concrete or eagerly differentiated array."""
    return any(is_abstract_tracer(leaf) for tree in trees for leaf in jax.tree.leaves(tree))


def refuse_explicit(strategy: str) -> None:
    """'explicit' commits every chunk to its device with device_put, which a jit trace cannot do."""
    raise UsageError(
        f"DataParallel(strategy={strategy!r}).apply was called inside jax.jit: 'explicit' commits each chunk "
        f"and replica to its device, one call per device, which a traced program cannot do. Use a mapped "
        f"strategy ({', '.join(map(repr, MAPPED_STRATEGIES))}), which places by shardings under jit, or "
        "call apply outside jit (eager jax.grad works with every strategy)")


def run(record: Strategy, call: StrategyCall) -> tuple[Any, Any]:
    """(output replicated on the mesh, collections) of `call` inside a trace; see the module docstring."""
    who = f"data_parallel(strategy={record.name!r}) under jit"
    if not record.mapped:
        refuse_explicit(record.name)
    if call.uneven != "exact":
        raise UsageError(f"{who}: uneven={call.uneven!r} runs eagerly only; under jit every batch is exact "
                         "(pass uneven='exact', the default)")
    require_distinct(call.devices, "device_ids")
    split, batch = split_args(call.args, call.kwargs, call.dim, who)
    if batch is None:  # no array to split: torch runs one replica, on device_ids[0]
        output, collections = call.replica_fn(call.variables, call.rngs, call.args, call.kwargs)
        return output, collections
    n, name = len(call.devices), call.mesh_axis
    sizes = tuple(chunk_sizes(batch, n))
    if call.axis_name is not None and len(set(sizes)) * len(sizes) != n:
        raise UsageError(
            f"{who}: axis_name={call.axis_name!r} binds collectives over every replica, but batch {batch} on {n} "
            f"devices splits into chunks {sizes}; a collective cannot span unequal or missing chunks. Use a batch "
            f"divisible by {n}, or drop axis_name")
    mesh = mesh_of(call.devices, name)
    variables = lax.with_sharding_constraint(call.variables, NamedSharding(mesh, P()))
    keys = replica_keys(call.rngs, n)
    if keys is not None:
        keys = lax.with_sharding_constraint(keys, NamedSharding(mesh, P(name)))
    even = len(sizes) == n and sizes[0] * n == batch
    arrays = lay_out_slots(split.arrays, tuple(split.axes), n, sizes[0], record.stacked)
    arrays = [lax.with_sharding_constraint(x, NamedSharding(mesh, spec_at(axis, name)))
              for x, axis in zip(arrays, split.axes)]
    program = program_for(ProgramKey.of(record, call, split, devices=call.devices,
                                        uneven_sizes=None if even else sizes), who)
    (stacked_out, stacked_collections), filled = program(variables, arrays, keys)
    output = gather_stacked(stacked_out, sizes, call.dim, who, filled)
    output = lax.with_sharding_constraint(output, NamedSharding(mesh, P()))
    return output, reduce_collections(stacked_collections, len(sizes), call.sync_collections)
