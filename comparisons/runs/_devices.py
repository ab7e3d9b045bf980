"""The devices a comparison runs on: torch's (cpu, virtual, cuda, or auto) and JAX's, with one rule for
compare() and the CLI.

'auto' takes CUDA when torch sees enough GPUs, else virtual devices (installed here when none are:
process-global, see dp_torch.virtual). JAX's CPU device count is raised here while JAX has not started.
"""
from __future__ import annotations

import os

from comparisons.errors import ComparisonError
from comparisons.runs._compile_cache import use_compile_cache

TORCH_DEVICES = ("cpu", "virtual", "cuda")
MAX_VIRTUAL = 64  # dp_torch.virtual.install's limit


def torch_kind(kind: str, n: int) -> str:
    """'auto' -> 'cuda' when torch sees `n` >= 1 GPUs, else 'virtual'; any other kind is kept."""
    if kind != "auto":
        return kind
    import torch

    # n < 1 is refused by the caller's own check, which must not find 'cuda' first (0 GPUs >= 0 devices)
    return "cuda" if n >= 1 and torch.cuda.device_count() >= n else "virtual"


def install_virtual(n: int, argument: str = "compare: devices", cpu_fix: str = "torch_devices='cpu'") -> None:
    """Install vdev:0..max(8, n)-1 unless virtual devices are installed already (then they must be enough)."""
    from dp_torch import virtual

    if n > MAX_VIRTUAL:
        raise ComparisonError(f"{argument}={n}: virtual torch devices go up to {MAX_VIRTUAL}; pass "
                              f"{argument.split()[-1]} <= {MAX_VIRTUAL}, or {cpu_fix} (the CPU repeated)")
    if not virtual.is_installed():
        virtual.install(min(MAX_VIRTUAL, max(8, n)))


def torch_devices(kind: str, n: int):
    """(n torch devices of `kind`, the single-device reference's device)."""
    import torch

    if kind == "cpu":
        return [torch.device("cpu")] * n, torch.device("cpu")
    if kind == "virtual":
        from dp_torch import virtual

        if not virtual.is_installed():
            raise ComparisonError("compare: torch_devices='virtual' needs dp_torch.virtual.install(n) "
                                  "first (process-global), or use torch_devices='auto' (installs them) or 'cpu'")
        available = virtual.devices()
    else:
        reason = no_cuda_reason()
        if reason is not None:
            raise ComparisonError(f"compare: torch_devices='cuda' but {reason}; use torch_devices='auto' "
                                  "(virtual devices vdev:i) or 'cpu'")
        available = [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
    if n > len(available):
        raise ComparisonError(f"compare: devices={n} but only {len(available)} {kind} torch device(s) "
                              f"exist; pass devices <= {len(available)}")
    return available[:n], torch.device("cuda", 0) if kind == "cuda" else torch.device("cpu")


def no_cuda_reason() -> str | None:
    """Why torch cannot use CUDA here, or None when it can: the one no-CUDA check behind compare()'s and the
    CLI's refusals of cuda devices (each names its own argument). Costs the import of torch."""
    import torch

    return None if torch.cuda.is_available() else "there is no CUDA here (torch.cuda.is_available() is False)"


def set_jax_cpu_devices(count: int) -> None:
    """Give JAX `count` CPU devices if it has not started and nobody chose a count (XLA_FLAGS or config)."""
    import jax

    if "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", ""):
        return
    if jax.config.jax_num_cpu_devices not in (-1, None):
        return
    try:
        jax.config.update("jax_num_cpu_devices", count)
    except RuntimeError:  # JAX has started: its device count is fixed; jax_devices() says what to do
        pass


def jax_devices(n: int):
    """The first `n` of jax.devices(), after raising the CPU count to max(8, n) when JAX has not started and
    turning on the persistent compilation cache (runs/_compile_cache.py)."""
    set_jax_cpu_devices(max(8, n))
    import jax

    use_compile_cache()

    available = jax.devices()
    if n > len(available):
        raise ComparisonError(
            f"compare: devices={n} but JAX has {len(available)} device(s) ({available[0].platform}) and "
            f"has started, so their number is fixed; pass devices <= {len(available)}, or in a fresh process call "
            f"jax.config.update('jax_num_cpu_devices', {n}) right after `import jax`, before any JAX operation "
            "(compare() does it itself when JAX has not started)")
    return available[:n]
