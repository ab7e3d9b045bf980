"""The JAX side of a `FlaxApply`: a Flax model called with its own training flag and inputs (Hugging Face's
Flax models through comparisons.hf). Made, converted and run as a linen Module is, in this process."""
from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from comparisons.errors import UsageError
from comparisons.models.jax_side import convert_flax, linen_in, make_flax_model


class FlaxApply:
    """A Flax model called the way the harness calls one: `apply(variables, *inputs, train=, mutable=)`.

    Args:
      module: a linen Module.
      train_arg: the module's training flag: 'train' (passed as is), 'deterministic' (passed
        negated, as Hugging Face's Flax models take it) or None (the module has none).
      prepare: inputs -> the module's positional arguments (e.g. add an attention mask), per chunk.
      **fixed: keyword arguments passed on every call.
    Hashes by identity, so the harness's compiled programs are reused while this object lives.
    """

    def __init__(self, module: Any, *, train_arg: str | None = "train",
                 prepare: Callable[[tuple], tuple] | None = None, **fixed: Any):
        if train_arg not in ("train", "deterministic", None):
            raise UsageError(f"FlaxApply: train_arg={train_arg!r}; use 'train', 'deterministic' or None")
        self.module, self.train_arg, self.prepare, self.fixed = module, train_arg, prepare, fixed

    def _kwargs(self, train: bool) -> dict:
        flag = {} if self.train_arg is None else {self.train_arg: train if self.train_arg == "train" else not train}
        return {**self.fixed, **flag}

    def _args(self, inputs: tuple) -> tuple:
        return tuple(self.prepare(inputs)) if self.prepare is not None else inputs

    def apply(self, variables: Any, *inputs: Any, train: bool = False, mutable: Any = False,
              rngs: Any = None) -> Any:
        """`module.apply` with the training flag translated; (out, updates) when `mutable`."""
        extra = ({"mutable": mutable} if mutable else {}) | ({"rngs": rngs} if rngs is not None else {})
        return self.module.apply(variables, *self._args(inputs), **self._kwargs(train), **extra)

    __call__ = apply

    def init(self, rngs: Any, *inputs: Any) -> Any:
        """`module.init` in evaluation mode (trace it under `jax.eval_shape` to avoid compiling)."""
        return self.module.init(rngs, *self._args(inputs), **self._kwargs(False))

    def __repr__(self) -> str:
        return f"FlaxApply({type(self.module).__name__}, train_arg={self.train_arg!r})"


class FlaxApplySide:
    """A `JaxSide` for a `FlaxApply`: made, converted and run as a linen Module; its compute dtype is its
    wrapped module's."""

    in_worker = False
    captures_layers = True
    computes_in_run_dtype = False

    def make(self, pair: Any) -> Any:
        return make_flax_model(pair)

    def convert(self, pair: Any, torch_module: Any, model: Any, dtype: Any) -> dict:
        return convert_flax(pair, torch_module, model, dtype)

    def computing_in(self, model: Any, dtype: str) -> Any:
        wrapper = copy.copy(model)
        wrapper.module = linen_in(model.module, dtype)
        return wrapper

    def run_in_worker(self, pair: Any, run: Any, strategies: list[str], devices: int, float64: bool
                      ) -> tuple[list, Any]:
        raise NotImplementedError("a FlaxApply runs in this process (in_worker is False)")

    def __repr__(self) -> str:
        return "FLAX_APPLY"


FLAX_APPLY = FlaxApplySide()
