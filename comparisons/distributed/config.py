"""The settings every worker of one multi-process run shares, and how the global batch is split.

Standard library only: the launcher and the CLI read this without loading torch or JAX.
"""
from __future__ import annotations

import dataclasses
import json


@dataclasses.dataclass(frozen=True)
class WorkerConfig:
    """One run's settings, passed to each worker as JSON on its command line.

    `devices` is the number of (emulated CPU) devices per JAX process; torch ranks use one CPU each.
    `rendezvous_timeout` bounds `init_process_group` / `jax.distributed.initialize` (seconds).
    `bench_steps` > 0: after the K steps, time that many more (comparisons/distributed/bench.py).
    `sources` are what a worker imports before it looks `pair` up ('module' or 'module:NAME'; none for a
    built-in pair): comparisons/distributed/pairs.py. `flax` is the Flax API of the JAX twin ("nnx", "linen"; None:
    the pair has no Flax model): a built-in pair's twin in that API, any other pair in its own.
    """

    pair: str
    batch_size: int
    steps: int
    optimizer: str = "sgd"
    dtype: str = "float32"
    seed: int = 0
    devices: int = 1
    rendezvous_timeout: float = 60.0
    sources: tuple[str, ...] = ()
    flax: str | None = None
    bench_steps: int = 0

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> WorkerConfig:
        fields = json.loads(text)
        return cls(**{**fields, "sources": tuple(fields.get("sources", ()))})


def chunk_rows(batch_size: int, parts: int) -> list[tuple[int, int]]:
    """(start, stop) rows of each of `parts` chunks, torch's sizes: ceil(B / parts), the last smaller.

    Raises ValueError when a part would get no row (torch then makes fewer chunks than parts,
    and a rank without rows has no loss to average).
    """
    size = -(-batch_size // parts)
    rows = [(start, min(start + size, batch_size)) for start in range(0, batch_size, size)]
    if len(rows) < parts:
        raise ValueError(f"batch_size={batch_size} on {parts} ranks/devices gives torch chunks of {size}, only "
                         f"{len(rows)} chunk(s): part {len(rows)} would get no rows; pass a multiple of {parts} "
                         "(or fewer processes/devices)")
    return rows
