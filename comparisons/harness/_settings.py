"""`Settings`: one comparison's settings, one frozen record, checked once when it is made.

compare(), the CLI and compare_distributed each build one and pass it on; nothing past the record checks
an argument again. A new option is one field here (and its check in `__post_init__`), one keyword of
compare(), and where it is read. Nothing here imports torch or JAX, but the strategy names load dp_jax.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from comparisons.errors import ComparisonError, positive_integer
from comparisons.harness import _arguments as check

PRECISIONS = ("float64-check", "off", "float64")


class _StrategyNames(Sequence[str]):
    """dp_jax.STRATEGIES, read on first use: importing dp_jax loads JAX, which importing comparisons must not."""

    def __getitem__(self, index):
        from dp_jax import STRATEGIES
        return STRATEGIES[index]

    def __len__(self) -> int:
        from dp_jax import STRATEGIES
        return len(STRATEGIES)


STRATEGIES: Sequence[str] = _StrategyNames()


@dataclasses.dataclass(frozen=True)
class Settings:
    """What one comparison runs with: compare()'s keywords, checked and settled.

    Made, every field is checked (each message names the argument, the value and the fix) and settled:
    `strategies` is the tuple that runs (every strategy for None), `dtype` is "float64" under
    precision="float64", the integers are ints. `caller` names who asked, in those messages.
    See `comparisons.compare` for what each field means.
    """

    batch_size: int = 10
    devices: int = 4
    strategies: Sequence[str] | None = None
    steps: int = 2
    optimizer: str = "sgd"
    dtype: str = "float32"
    seed: int = 0
    torch_devices: str = "auto"
    padding: bool = False
    precision: str = "float64-check"
    rtol: float | None = None
    atol: float | None = None
    layers: bool = False
    bench: bool = False
    bench_steps: int = 10
    flax: str | None = None
    progress: Callable[[str, int], None] | None = dataclasses.field(default=None, compare=False)
    caller: str = dataclasses.field(default="compare", compare=False, repr=False)

    def __post_init__(self) -> None:
        from comparisons.judge import TOLERANCES
        from comparisons.runs import OPTIMIZERS, TORCH_DEVICES

        check.choice("dtype", self.dtype, tuple(TOLERANCES), self.caller)
        if check.choice("precision", self.precision, PRECISIONS, self.caller) == "float64":
            self._settle("dtype", "float64")
        check.choice("optimizer", self.optimizer, tuple(OPTIMIZERS), self.caller)
        for name in ("batch_size", "steps"):
            self._settle(name, positive_integer(getattr(self, name), argument=name, caller=self.caller))
        self._settle("seed", check.seed(self.seed))
        self._settle("rtol", check.tolerance("rtol", self.rtol))
        self._settle("atol", check.tolerance("atol", self.atol))
        check.choice("torch_devices", self.torch_devices, ("auto", *TORCH_DEVICES))
        if self.flax is not None:
            from comparisons.models.builtin import FLAX_APIS

            check.choice("flax", self.flax, FLAX_APIS, self.caller)
        check.progress(self.progress)
        self._settle("devices", positive_integer(self.devices, argument="devices", caller=self.caller))
        check.flag("layers", self.layers)
        check.flag("bench", self.bench)
        self._settle("bench_steps", positive_integer(self.bench_steps, argument="bench_steps", caller=self.caller,
                                                     example=", e.g. 10 timed steps per side"))
        if not isinstance(self.padding, bool):
            raise ComparisonError(f"compare: padding={self.padding!r} is not a bool; pass True to measure what "
                                  "padding the last chunk would change, or False")
        self._settle("strategies", tuple(check.strategies(check.strategy_names(self.strategies), STRATEGIES)))

    def _settle(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)  # frozen: only __post_init__ settles a field

    @property
    def in_float64(self) -> bool:
        """Whether a float32 run gets its float64 twin (dtype float64 is that check itself; "off" skips it)."""
        return self.dtype == "float32" and self.precision != "off"

    @property
    def rtol_used(self) -> float:
        """The rtol of every leaf: the user's, else the default of the dtype."""
        from comparisons.judge import TOLERANCES

        return TOLERANCES[self.dtype] if self.rtol is None else self.rtol

    def run_config(self, batch_axis: int) -> Any:
        """The runs' RunConfig for a pair that takes its batch on `batch_axis`."""
        from comparisons.runs import RunConfig

        return RunConfig(self.batch_size, self.steps, self.optimizer, self.dtype, self.seed, batch_axis)

    def header(self, model: str, torch_devices: str, flax: str | None = None) -> dict[str, Any]:
        """The report's settings fields (ComparisonReport's keywords) for `model` run on `torch_devices`, its JAX
        side in the Flax API `flax` ("nnx", "linen"; None: no Flax model)."""
        return {"model": model, "flax": flax, "batch_size": self.batch_size, "devices": self.devices,
                "strategies": list(self.strategies), "steps": self.steps, "optimizer": self.optimizer,
                "dtype": self.dtype, "seed": self.seed, "torch_devices": torch_devices,
                "tolerance": self.tolerance_record(),
                "precision": "float64" if self.dtype == "float64" else self.precision}

    def tolerance_record(self) -> dict:
        """A report's `tolerance`: the bounds used and where each came from (docs/report_schema.md)."""
        from comparisons.judge import TOLERANCES

        derived = ("derived per leaf: 8 x the leaf's float32 rounding measured against the float64 run, at least "
                   "8 ulps of the subject's largest |value|" if self.in_float64 else
                   f"derived per leaf: rtol x the leaf's largest |value|, at least 8 ulps ({self.dtype}) of the "
                   "subject's largest |value|")
        return {"rtol": self.rtol_used,
                "rtol_source": f"default for {self.dtype}" if self.rtol is None else "set by the user",
                "atol": self.atol, "atol_source": derived if self.atol is None else "set by the user",
                "float64_rtol": TOLERANCES["float64"] if self.in_float64 else None}


def tolerance_record(dtype: str, precision: str, rtol: float | None = None, atol: float | None = None) -> dict:
    """A report's `tolerance` for these four settings alone (the multi-process report's, which has no Settings)."""
    return Settings(dtype=dtype, precision=precision, rtol=rtol, atol=atol, strategies=("explicit",)).tolerance_record()
