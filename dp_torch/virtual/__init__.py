"""N distinct torch devices on a CPU (`vdev:0` … `vdev:N-1`), for placement tests and demos.

`install(n)` renames PyTorch's PrivateUse1 backend to `vdev` and backs it with CPU tensors in
storage-less wrappers. Devices are real `torch.device`s: a missed `.to()` raises PyTorch's
same-device error, exactly where it would on CUDA. Numbers come from the CPU kernels.
Process-global and first-wins: install once per process (an earlier CPU backward is fine).
See docs/virtual_devices.md for what is and is not emulated.

Modules: `tensor` (the wrapper and its dispatch), `setup` (registration with torch),
`comm` (stand-ins so stock `torch.nn.parallel` runs here), `kernels` (CPU versions of
accelerator-only ops), `moves` (modules moved while an autograd graph holds them).
"""
from __future__ import annotations

import torch

from dp_torch._errors import UsageError, UsageTypeError
from dp_torch.virtual import tensor as _vt
from dp_torch.virtual.comm import stock_comm

__all__ = ["install", "is_installed", "devices", "cpu_view", "shares_memory", "stock_comm"]

_installed: tuple[int, str] | None = None
_libraries: list = []  # torch.library registrations live as long as these objects


def install(n: int = 4, name: str = "vdev") -> list[torch.device]:
    """Makes `name:0` … `name:n-1` torch devices backed by CPU memory, once per process.

    Changes torch's global state for the rest of the process: torch.accelerator reports `name`,
    CPU `pin_memory()` fails, backward runs on the calling thread. A second call with the same
    arguments is a no-op; with others it raises.

    Args:
        n: how many devices (1-64).
        name: the device type name PrivateUse1 gets (it can be named once per process).
    Returns:
        The devices, `[torch.device(name, 0), ...]`.
    """
    _check_arguments(n, name)
    if _installed is not None:
        if _installed != (n, name):
            raise RuntimeError(
                f"virtual.install(n={n}, name={name!r}): already installed as "
                f"install(n={_installed[0]}, name={_installed[1]!r}) in this process; the backend "
                "is process-global and cannot be re-installed, so call install with the same "
                "arguments (or run in a fresh process)"
            )
        return devices()
    _check_name_is_free(name)
    _check_torch_support()
    _register(n, name)
    return devices()


def is_installed() -> bool:
    """True once `install` has run in this process."""
    return _installed is not None


def devices() -> list[torch.device]:
    """The installed virtual devices, `[name:0, …, name:n-1]`; raises if not installed."""
    if _installed is None:
        raise RuntimeError("virtual.devices(): no virtual devices; call virtual.install() first")
    n, name = _installed
    return [torch.device(name, i) for i in range(n)]


def cpu_view(tensor: torch.Tensor) -> torch.Tensor:
    """The CPU tensor holding a virtual tensor's values (shares memory; no copy).

    Virtual tensors have no storage (`data_ptr()` is 0), so aliasing checks go through this.
    A CPU tensor is returned as is.
    """
    if isinstance(tensor, _vt.VTensor):
        return tensor._data
    if isinstance(tensor, torch.Tensor) and tensor.device.type == "cpu":
        return tensor
    raise UsageTypeError(
        f"cpu_view: expected a virtual-device or CPU tensor, got "
        f"{type(tensor).__name__} on {getattr(tensor, 'device', None)}"
    )


def shares_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True if `a` and `b` (virtual or CPU tensors) share the same underlying CPU storage."""
    a_data, b_data = cpu_view(a), cpu_view(b)
    return a_data.untyped_storage().data_ptr() == b_data.untyped_storage().data_ptr()


def _check_arguments(n: int, name: str) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 64:
        raise UsageError(f"virtual.install: n={n!r}; pass an int between 1 and 64")
    if not isinstance(name, str) or not name.isidentifier() or name in ("cpu", "cuda", "meta"):
        raise UsageError(
            f"virtual.install: name={name!r}; pass a new lowercase identifier such as 'vdev'"
        )


def _check_name_is_free(name: str) -> None:
    taken = torch._C._get_privateuse1_backend_name()
    if taken not in ("privateuseone", name):
        raise RuntimeError(
            f"virtual.install(name={name!r}): PyTorch's PrivateUse1 backend is already named "
            f"{taken!r} in this process, and it can be named only once"
        )


def _check_torch_support() -> None:
    from dp_torch.virtual.setup import missing_torch_apis

    missing = missing_torch_apis()
    if missing:
        raise RuntimeError(
            f"virtual.install: torch {torch.__version__} lacks the experimental APIs "
            f"{', '.join(missing)}; virtual devices need torch 2.13 (tested) or a release with them"
        )


def _register(n: int, name: str) -> None:
    global _installed
    from dp_torch.virtual.setup import register_backend

    _vt.set_backend(name, n)
    _libraries.extend(register_backend(n, name))
    _installed = (n, name)
