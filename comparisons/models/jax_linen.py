"""The JAX side of a flax.linen Module: made here, run by comparisons.runs in this process, layers intercepted."""
from __future__ import annotations

from typing import Any

from comparisons.models.jax_flax_apply import FLAX_APPLY, FlaxApply
from comparisons.models.jax_nnx import NNX, NNXApply, is_nnx_module, nnx_apply, refuse_nnx_kind
from comparisons.models.jax_side import convert_flax, linen_in, make_flax_model


class LinenSide:
    """A `JaxSide` for a linen Module called as `apply(variables, *inputs, train=, mutable=)`."""

    in_worker = False
    captures_layers = True
    computes_in_run_dtype = False

    def make(self, pair: Any) -> Any:
        made = pair.make_flax()
        refuse_nnx_kind(pair, made)
        if is_nnx_module(made):  # a ModelPair made by hand around an NNX module: run as the NNX side runs it
            return nnx_apply(made)
        return make_flax_model(pair, made)

    def convert(self, pair: Any, torch_module: Any, model: Any, dtype: Any) -> dict:
        if isinstance(model, NNXApply):
            return NNX.convert(pair, torch_module, model, dtype)
        return convert_flax(pair, torch_module, model, dtype)

    def computing_in(self, model: Any, dtype: str) -> Any:
        if isinstance(model, FlaxApply):  # a ModelPair made by hand around a FlaxApply
            return FLAX_APPLY.computing_in(model, dtype)
        if isinstance(model, NNXApply):  # ... or around an NNX module
            return NNX.computing_in(model, dtype)
        return linen_in(model, dtype)

    def run_in_worker(self, pair: Any, run: Any, strategies: list[str], devices: int, float64: bool
                      ) -> tuple[list, Any]:
        raise NotImplementedError("a linen Module runs in this process (in_worker is False)")

    def __repr__(self) -> str:
        return "LINEN"


LINEN = LinenSide()
