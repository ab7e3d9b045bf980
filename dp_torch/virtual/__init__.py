"""N distinct torch devices on a CPU (`vdev:0` … `vdev:N-1`), for placement tests and demos.

`install(n)` renames PyTorch's PrivateUse1 backend to `vdev` and backs it with CPU tensors in
storage-less wrappers. Devices are real `torch.device`s: a missed `.to()` raises PyTorch's
same-device error, exactly where it would on CUDA. Numbers come from the CPU kernels.
Process-global and first-wins: install once per process (an earlier CPU backward is fine).
See docs/virtual_devices.md for what is and is not emulated.

Modules: `backend` (install, devices, cpu_view: the process's one backend), `tensor` (the wrapper and
its dispatch), `setup` (registration with torch),
`comm` (stand-ins so stock `torch.nn.parallel` runs here), `kernels` (CPU versions of
accelerator-only ops), `moves` (modules moved while an autograd graph holds them).
"""
from dp_torch.virtual.backend import cpu_view, devices, install, is_installed, shares_memory
from dp_torch.virtual.comm import stock_comm

__all__ = ["install", "is_installed", "devices", "cpu_view", "shares_memory", "stock_comm"]
