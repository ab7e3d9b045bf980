"""Describe the machine a run measured: CPU, cores, library versions, device kind."""
from __future__ import annotations

import os
import platform
from pathlib import Path


def cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def describe(device: str) -> dict[str, str | int]:
    """CPU model, cores, python/torch/jax/flax versions and the JAX/torch devices used."""
    import flax
    import jax
    import torch

    jax_devices = jax.devices()
    info: dict[str, str | int] = {
        "cpu": cpu_model(),
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "jax": jax.__version__,
        "flax": flax.__version__,
        "platform": platform.platform(),
        "device": device,
        "jax_devices": f"{len(jax_devices)} x {jax_devices[0].device_kind} ({jax_devices[0].platform})",
        "torch_devices": f"{torch.get_num_threads()} intra-op threads",
    }
    if device == "cpu":
        info["jax_devices"] += ", emulated with --xla_force_host_platform_device_count (they share the cores)"
        info["torch_devices"] = f'"cpu" repeated per replica, {info["torch_devices"]}'
    elif torch.cuda.is_available():
        info["torch_devices"] = f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}"
    return info
