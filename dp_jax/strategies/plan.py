"""ShardPlan: which device runs which rows, and how a strategy pads them to equal shards.

Every strategy keeps torch's chunking: chunk size ceil(B / n), and only as many replicas as there
are chunks (batch 5 on 4 devices: 2, 2, 1 on three devices). The mapped strategies ('pmap',
'sharded', 'shard_map') need equal shards, so they pad the *last* chunk up to the chunk size by
repeating its last row. Replica i therefore always holds torch's rows i*c .. i*c+c-1, chunk 0 is
never padded, and padded rows are dropped before the output is gathered.
"""
from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax

from dp_jax._devices import device_label
from dp_jax.scatter_gather import chunk_sizes
from dp_jax.strategies.table import lookup


class ShardPlan(NamedTuple):
    """Where one call's rows go.

    Attributes:
      strategy: the strategy that made the plan.
      batch_size: rows along `dim` in the inputs (None when no input array is split).
      chunk_sizes: torch chunk sizes, one per replica (`replica i` runs on `devices[i]`).
      padded_size: rows after padding (== batch_size unless the last chunk is padded).
      devices: the devices that run a replica, `device_ids[:len(chunk_sizes)]` as in torch.
    """

    strategy: str
    batch_size: int | None
    chunk_sizes: tuple[int, ...]
    padded_size: int | None
    devices: tuple[jax.Device, ...]

    @property
    def pad_rows(self) -> int:
        """Rows of padding appended to the last chunk (0 for 'explicit' and even batches)."""
        return 0 if self.batch_size is None else self.padded_size - self.batch_size

    @property
    def shard_size(self) -> int:
        """Rows each replica computes on (the chunk size; padded shards included)."""
        return self.chunk_sizes[0] if self.chunk_sizes else 0

    def rows(self, replica: int) -> range:
        """The input rows (original indices, padding excluded) that `replica` computes on."""
        start = sum(self.chunk_sizes[:replica])
        return range(start, start + self.chunk_sizes[replica])

    def describe(self) -> str:
        """One line per replica, e.g. "replica 2 on cpu:2: rows 4..4 (+1 padding row)"."""
        lines = []
        for i, device in enumerate(self.devices):
            rows = self.rows(i)
            span = f"rows {rows.start}..{rows.stop - 1}" if rows else "no rows"
            pad = self.pad_rows if i == len(self.devices) - 1 else 0
            lines.append(f"replica {i} on {device_label(device)}: {span}" + (f" (+{pad} padding)" if pad else ""))
        return "\n".join(lines)


class ReplicaPlacement(NamedTuple):
    """Where one call's variables and inputs sit, replica by replica (from DataParallel.placed).

    Attributes:
      variables_per_replica: replica i's variables; every array is committed to plan.devices[i].
      inputs_per_replica: replica i's (args, kwargs) as it computes on them, padding rows included
        (the last replica's, `plan.pad_rows` of them); non-array leaves are shared.
      plan: the ShardPlan (devices, torch chunk sizes, padding).
    For the mapped strategies the arrays are per-device views (`addressable_shards`) of the global
    arrays the program takes, and 'pmap'/'sharded' inputs keep their size-1 replica axis at `dim`.
    """

    variables_per_replica: list[Any]
    inputs_per_replica: list[tuple[tuple, dict]]
    plan: ShardPlan


def per_device_views(tree: Any, devices: tuple[jax.Device, ...]) -> list[Any]:
    """One pytree per device: each array leaf's shard on that device (a view: no copy, no sync)."""
    def shard_on(leaf: Any, device: jax.Device) -> Any:
        if not isinstance(leaf, jax.Array):
            return leaf
        return next(shard.data for shard in leaf.addressable_shards if shard.device == device)
    return [jax.tree.map(lambda leaf, device=device: shard_on(leaf, device), tree) for device in devices]


def plan_shards(batch_size: int | None, devices: tuple[jax.Device, ...], strategy: str) -> ShardPlan:
    """The ShardPlan for `batch_size` rows on `devices` under `strategy` (no data is touched).

    With no input array to split (batch_size None), one replica runs on devices[0], as in torch.
    """
    record = lookup(strategy)
    if batch_size is None:
        return ShardPlan(strategy, None, (), None, tuple(devices[:1]))
    sizes = tuple(chunk_sizes(batch_size, len(devices)))
    padded = len(sizes) * (sizes[0] if sizes else 0) if record.mapped else batch_size
    return ShardPlan(strategy, batch_size, sizes, padded, tuple(devices[: len(sizes)]))


def even_batch_sizes_near(batch_size: int, n_devices: int) -> tuple[int, int]:
    """The nearest batch sizes below and above `batch_size` that split into equal torch chunks."""
    def even(b: int) -> bool:
        return b > 0 and b % math.ceil(b / n_devices) == 0
    below = next((b for b in range(batch_size - 1, 0, -1) if even(b)), n_devices)
    above = next(b for b in range(batch_size + 1, batch_size + n_devices * batch_size + 2) if even(b))
    return below, above
