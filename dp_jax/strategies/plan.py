"""ShardPlan: which device runs which rows, and how each replica runs.

Every strategy keeps torch's chunking: chunk size ceil(B / n), and only as many replicas as there
are chunks (batch 5 on 4 devices: 2, 2, 1 on three devices), replica i on torch's rows
i*c .. i*c+c-1. By default (uneven='exact') every replica computes on exactly its chunk: a mapped
strategy runs all of them as one program, the short last chunk on its own rows alone (switch.py).
With uneven='pad' a mapped strategy instead pads the last chunk up to c rows by repeating its last
row (what a hand-written pmap port does) and drops those rows before gathering.
"""
from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax

from dp_jax._devices import device_label
from dp_jax._errors import UsageError
from dp_jax.scatter_gather import chunk_sizes
from dp_jax.strategies.table import lookup

UNEVEN_MODES = ("exact", "pad", "pad_unchecked")
PADDING_MODES = ("pad", "pad_unchecked")  # pad_unchecked: pad and refuse nothing (to measure what padding changes)


class ShardPlan(NamedTuple):
    """Where one call's rows go, and how each replica runs.

    Attributes:
      strategy: the strategy that made the plan.
      batch_size: rows along `dim` in the inputs (None when no input array is split).
      chunk_sizes: torch chunk sizes, one per replica (`replica i` runs on `devices[i]`).
      padded_size: rows after padding (== batch_size unless uneven='pad' pads the last chunk).
      devices: the devices that run a replica, `device_ids[:len(chunk_sizes)]` as in torch.
      uneven: 'exact' (no padding row enters a computation) or 'pad'.
    """

    strategy: str
    batch_size: int | None
    chunk_sizes: tuple[int, ...]
    padded_size: int | None
    devices: tuple[jax.Device, ...]
    uneven: str = "exact"

    @property
    def pad_rows(self) -> int:
        """Rows of padding appended to the last chunk (0 unless uneven='pad' and the batch is uneven)."""
        return 0 if self.batch_size is None else self.padded_size - self.batch_size

    @property
    def shard_size(self) -> int:
        """Rows of a full chunk: what every replica of a mapped program computes on (padding included)."""
        return self.chunk_sizes[0] if self.chunk_sizes else 0

    @property
    def short_replica(self) -> int | None:
        """The replica whose chunk is short and that a mapped program computes on its rows alone
        (uneven='exact'), or None (equal chunks, padding, or 'explicit': every chunk its own call)."""
        short = bool(self.chunk_sizes) and self.chunk_sizes[-1] < self.shard_size
        if short and not self.pad_rows and lookup(self.strategy).mapped:
            return len(self.chunk_sizes) - 1
        return None

    @property
    def mapped_replicas(self) -> int:
        """How many replicas one mapped program runs: all of them (0 for 'explicit': one call per replica)."""
        return len(self.devices) if lookup(self.strategy).mapped else 0

    def rows(self, replica: int) -> range:
        """The input rows (original indices, padding excluded) that `replica` computes on."""
        start = sum(self.chunk_sizes[:replica])
        return range(start, start + self.chunk_sizes[replica])

    def how(self, replica: int) -> str:
        """How `replica` runs: "own call", "one program over replicas 0..3" (+ the short chunk or padding)."""
        if replica >= self.mapped_replicas:
            return "own call"
        program = f"one program over replicas 0..{self.mapped_replicas - 1}"
        if replica == self.short_replica:
            return program + ", short chunk: its rows alone"
        pad = self.pad_rows if replica == len(self.devices) - 1 else 0
        return program + (f", +{pad} padding row{'s' if pad > 1 else ''}" if pad else "")

    def describe(self) -> str:
        """One line per replica, e.g. "replica 3 on cpu:3: rows 9..10 (one program over replicas 0..3, short
        chunk: its rows alone)"."""
        lines = []
        for i, device in enumerate(self.devices):
            rows = self.rows(i) if self.chunk_sizes else range(0)
            span = f"rows {rows.start}..{rows.stop - 1}" if rows else "no rows"
            lines.append(f"replica {i} on {device_label(device)}: {span} ({self.how(i)})")
        return "\n".join(lines)


class ReplicaPlacement(NamedTuple):
    """Where one call's variables and inputs sit, replica by replica (from DataParallel.placed).

    Attributes:
      variables_per_replica: replica i's variables; every array is committed to plan.devices[i].
      inputs_per_replica: replica i's (args, kwargs) as it computes on them (with uneven='pad' the
        last replica's includes `plan.pad_rows` padding rows); non-array leaves are shared.
      plan: the ShardPlan (devices, torch chunk sizes, how each replica runs).
    For the replicas of a mapped program the arrays are per-device views (`addressable_shards`) of
    the global arrays the program takes, and 'pmap'/'sharded' inputs keep their size-1 replica axis
    at `dim`; the short last chunk's replica holds its own rows (a slice of the slot it computes from).
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


def plan_shards(batch_size: int | None, devices: tuple[jax.Device, ...], strategy: str,
                uneven: str = "exact") -> ShardPlan:
    """The ShardPlan for `batch_size` rows on `devices` under `strategy` (no data is touched).

    With no input array to split (batch_size None), one replica runs on devices[0], as in torch.
    """
    record = lookup(strategy)
    check_uneven(uneven, record.name)
    if batch_size is None:
        return ShardPlan(strategy, None, (), None, tuple(devices[:1]), uneven)
    sizes = tuple(chunk_sizes(batch_size, len(devices)))
    padded = len(sizes) * (sizes[0] if sizes else 0) if uneven in PADDING_MODES else batch_size
    return ShardPlan(strategy, batch_size, sizes, padded, tuple(devices[: len(sizes)]), uneven)


def check_uneven(uneven: str, strategy: str) -> None:
    """Raise for an unknown `uneven` mode, or uneven='pad' with a strategy that never pads."""
    if uneven not in UNEVEN_MODES:
        raise UsageError(f"uneven={uneven!r} is unknown; pass 'exact' (the default: no padding row enters a "
                         "computation), 'pad' (a mapped strategy pads the last chunk, as a pmap port does, and "
                         "refuses what it can see that changes) or 'pad_unchecked' (pads and refuses nothing)")
    if uneven in PADDING_MODES and not lookup(strategy).mapped:
        raise UsageError(f"uneven={uneven!r} needs a strategy that maps one program over equal shards, but "
                         f"strategy={strategy!r} runs every chunk as its own call; pass uneven='exact' or "
                         "strategy='pmap', 'sharded' or 'shard_map'")


def even_batch_sizes_near(batch_size: int, n_devices: int) -> tuple[int, int]:
    """The nearest batch sizes below and above `batch_size` that split into equal torch chunks."""
    def even(b: int) -> bool:
        return b > 0 and b % math.ceil(b / n_devices) == 0
    below = next((b for b in range(batch_size - 1, 0, -1) if even(b)), n_devices)
    above = next(b for b in range(batch_size + 1, batch_size + n_devices * batch_size + 2) if even(b))
    return below, above
