"""Beyond one process: PyTorch's DistributedDataParallel and multi-process JAX, checked like the rest.

    from comparisons.distributed import compare_distributed
    report = compare_distributed("cnn_bn", processes=2, devices=2, batch_size=8, steps=3)

Modules: `launcher` (P local ranks on 127.0.0.1, timeouts, no process left behind) and `ranks`
(a rank's environment, port and result file; LaunchError), both standard library only; `config`
(the settings the workers share); `torch_worker` (a pair's torch model under stock
DistributedDataParallel, gloo); `jax_worker` + `multihost_step` (jax.distributed, one global mesh,
dp_jax's compiled step); `compare`, `checks` and `judge` (the report: DDP and multi-process JAX beside
one-process dp_torch and dp_jax, and the differences DDP has by design, measured); `bench` (DDP's step
beside the multi-process JAX step, timed once every check passed); `cli`.
Importing this package imports neither torch nor JAX.
"""
from comparisons.distributed.compare import compare_distributed
from comparisons.distributed.config import WorkerConfig, chunk_rows
from comparisons.distributed.launcher import Launch, launch
from comparisons.distributed.ranks import LaunchError, RankResult, free_port, write_result

__all__ = ["Launch", "LaunchError", "RankResult", "WorkerConfig", "chunk_rows", "compare_distributed", "free_port",
           "launch", "write_result"]
