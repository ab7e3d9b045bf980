"""Running code written for CUDA on virtual devices: `cuda` names become the replicas' devices.

Inside DataParallel's worker for replica i, PyTorch makes `cuda:i` the current device, so
`.cuda()` and `device="cuda"` land on the replica's own GPU, while `"cuda:0"` is always GPU 0. This
mode gives a `vdev` run the same meaning: `cuda` -> the replica's device, `cuda:k` -> `vdev:k`.
Cost: a Python call per torch function while it is active (doctor runs only).
"""
from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

from comparisons.doctor.source import user_line


class CudaAsReplicaDevice(TorchFunctionMode):
    """Maps CUDA device names in torch calls to `devices` (index-less: `devices[replica]`).

    `renamed`, when given, collects each indexed name it mapped: `{"vdev:0": ("cuda:0", "model.py:12")}`,
    so the report can say that a `vdev:k` it names is the model's `cuda:k`.
    """

    def __init__(self, devices: list[torch.device], replica: int,
                 renamed: dict[str, tuple[str, str | None]] | None = None) -> None:
        super().__init__()
        self.devices = devices
        self.replica = replica
        self.renamed = renamed

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func is torch.Tensor.cuda:
            device = args[1] if len(args) > 1 else kwargs.pop("device", None)
            options = {k: kwargs[k] for k in ("non_blocking", "memory_format") if k in kwargs}
            return args[0].to(self._device(device), **options)
        if "device" in kwargs:
            kwargs["device"] = self._map(kwargs["device"])
        return func(*(self._map(a) for a in args), **kwargs)

    def _device(self, device) -> torch.device:
        if device is None:
            return self.devices[self.replica]
        if isinstance(device, int):
            return self._indexed(device)
        return self._map(torch.device(device))

    def _map(self, value):
        if isinstance(value, str) and value.startswith("cuda"):
            value = torch.device(value)
        if isinstance(value, torch.device) and value.type == "cuda":
            return self.devices[self.replica] if value.index is None else self._indexed(value.index)
        return value

    def _indexed(self, index: int) -> torch.device:
        if not 0 <= index < len(self.devices):
            raise RuntimeError(f"doctor: the model asks for cuda:{index}, but the run has "
                               f"{len(self.devices)} devices; pass --devices {index + 1} or more")
        device = self.devices[index]
        if self.renamed is not None and str(device) not in self.renamed:
            self.renamed[str(device)] = (f"cuda:{index}", user_line())
        return device
