"""dp_jax: PyTorch's nn.DataParallel pipeline (scatter, replicate, parallel_apply, gather) in JAX.

Devices are `jax.Device`s or indices into `jax.devices()`; every array a step returns is committed
to its device. Chunk sizes, padding and gather rules follow torch (docs/divergences.md (section dp_jax) lists
where we refuse instead of reproducing a torch bug). `DataParallel`/`data_parallel` run the four
steps per device ("explicit") or as one sharded program (see `STRATEGIES`; `MAPPED_STRATEGIES` are those
that run as one program, inside jit), for a linen Module, an apply function, or a Flax NNX module called as
torch's `dp(x)` (dp_jax/nnx.py). `clear_caches()` empties
dp_jax's module caches (the next calls recompile). A refusal of user input is a `UsageError` (a
ValueError; `UsageTypeError` is also a TypeError).
"""
from dp_jax._caches import clear_caches
from dp_jax._errors import UsageError, UsageTypeError
from dp_jax.data_parallel import DataParallel, data_parallel
from dp_jax.parallel_apply import parallel_apply
from dp_jax.replicate import replicate
from dp_jax.scatter_gather import chunk_sizes, gather, scatter, scatter_kwargs
from dp_jax.strategies import MAPPED_STRATEGIES, STRATEGIES, ReplicaPlacement, ShardPlan

__all__ = [
    "MAPPED_STRATEGIES",
    "STRATEGIES",
    "ReplicaPlacement",
    "ShardPlan",
    "DataParallel",
    "UsageError",
    "UsageTypeError",
    "chunk_sizes",
    "clear_caches",
    "data_parallel",
    "gather",
    "parallel_apply",
    "replicate",
    "scatter",
    "scatter_kwargs",
]
