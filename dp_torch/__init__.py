"""dp_torch: PyTorch's nn.DataParallel pipeline (scatter, replicate, parallel_apply, gather) for any device.

Works on CUDA, on a PrivateUse1 backend, and on ``"cpu"`` repeated N times (N replicas on one CPU).
A refusal of user input is a ``UsageError`` (a ValueError; ``UsageTypeError`` is also a TypeError).
"""
from dp_torch._errors import UsageError, UsageTypeError
from dp_torch.data_parallel import DataParallel, data_parallel
from dp_torch.parallel_apply import parallel_apply
from dp_torch.replicate import replicate
from dp_torch.scatter_gather import gather, scatter, scatter_kwargs

__all__ = [
    "DataParallel", "UsageError", "UsageTypeError", "data_parallel", "gather", "parallel_apply", "replicate", "scatter",
    "scatter_kwargs",
]
