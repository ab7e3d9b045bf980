"""The JAX side of a flax.linen Module: made here, run by comparisons.runs in this process, layers intercepted."""
from __future__ import annotations

import dataclasses
from typing import Any


class LinenSide:
    """A `JaxSide` for a linen Module called as `apply(variables, *inputs, train=, mutable=)`."""

    in_worker = False
    captures_layers = True

    def make(self, pair: Any) -> Any:
        model = pair.make_flax()
        pair.check_made("make_flax", model, callable(getattr(model, "init", None)) and callable(
            getattr(model, "apply", None)), "flax.linen.Module (nor a FlaxApply); return the Flax model, e.g. "
            "make_flax=lambda: MyNet()")
        return model

    def convert(self, pair: Any, torch_module: Any, model: Any, dtype: Any) -> dict:
        """The given variables (`pair.variables`, converted by another tool) or the torch weights converted by
        `pair.mapping`, checked against the shapes of the model's own init (traced, not compiled)."""
        from comparisons.models.pair import given_variables

        if pair.variables is not None:
            return given_variables(pair.variables, dtype)
        return pair.torch_to_flax(torch_module.state_dict(), like=pair.flax_shapes(model))

    def computing_in(self, model: Any, dtype: str) -> Any:
        """A linen Module with a `dtype` field (Hugging Face's compute in float32 unless told) cloned to `dtype`."""
        from comparisons.models.jax_flax_apply import FLAX_APPLY, FlaxApply

        if isinstance(model, FlaxApply):  # a ModelPair made by hand around a FlaxApply
            return FLAX_APPLY.computing_in(model, dtype)
        if dataclasses.is_dataclass(model) and "dtype" in {f.name for f in dataclasses.fields(model)}:
            return model.clone(dtype=dtype)
        return model

    def run_in_worker(self, pair: Any, run: Any, strategies: list[str], devices: int, float64: bool
                      ) -> tuple[list, Any]:
        raise NotImplementedError("a linen Module runs in this process (in_worker is False)")

    def __repr__(self) -> str:
        return "LINEN"


LINEN = LinenSide()
