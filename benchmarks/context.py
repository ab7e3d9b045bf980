"""What one run measures with: device kind, sizes, repetitions (full or --quick)."""
from __future__ import annotations

from dataclasses import dataclass, field

from benchmarks.timing import Settings

EMULATED_CPU_DEVICES = 8  # the device sweep goes up to 8; sections use the first 4 unless stated
DEFAULT_DEVICES = 4


@dataclass(frozen=True)
class Context:
    """Run-wide choices; `quick` shrinks every sweep to a smoke test."""

    device: str = "cpu"
    quick: bool = False
    settings: Settings = field(default_factory=Settings)

    @property
    def device_counts(self) -> tuple[int, ...]:
        return (2,) if self.quick else (1, 2, 4, 8)

    @property
    def strategy_widths(self) -> tuple[int, ...]:
        return (16,) if self.quick else (64, 512)

    @property
    def size_sweep(self) -> tuple[int, ...]:
        return (16,) if self.quick else (64, 256, 1024, 2048)

    @property
    def batch_size(self) -> int:
        return 16 if self.quick else 128

    @property
    def n_devices(self) -> int:
        """Devices for the sections that do not sweep: 4 (2 in --quick), fewer if a GPU machine has fewer."""
        wanted = 2 if self.quick else DEFAULT_DEVICES
        return wanted if self.device == "cpu" else min(wanted, len(self.jax_devices()))

    def torch_devices(self, n: int) -> list:
        """n torch devices for dp_torch: "cpu" repeated, or the first n CUDA devices."""
        import torch

        if self.device == "cpu":
            return [torch.device("cpu")] * n
        return [torch.device("cuda", i) for i in range(min(n, torch.cuda.device_count()))]

    def torch_sync(self) -> None:
        """Wait for queued device work (CUDA is asynchronous; CPU ops return when done)."""
        if self.device == "gpu":
            import torch

            torch.cuda.synchronize()

    def jax_devices(self, n: int | None = None) -> list:
        """The first `n` (default: all) JAX devices of the chosen platform (emulated on cpu)."""
        import jax

        available = jax.devices("gpu" if self.device == "gpu" else "cpu")
        if n is None:
            return available
        if n > len(available):
            raise RuntimeError(f"benchmark wants {n} JAX devices but {self.device} has {len(available)}")
        return available[:n]


def settings_for(quick: bool) -> Settings:
    if quick:
        return Settings(reps=3, target_s=0.003, warmup=1, samples=1)
    return Settings(reps=7, target_s=0.02, warmup=2, samples=2)
