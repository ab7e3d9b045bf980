"""How the harness calls a transformers Flax model: through the model's own `__call__`, by keyword.

transformers' Flax `__call__` fills what a caller leaves out (attention masks, token types,
positions, head masks, decoder positions) and picks `output_hidden_states`/`return_dict` from the
config, exactly as the torch model's `forward` does; the Flax *module* takes them positionally
and has no defaults. So the harness's positional inputs (in torch's `forward` order) are passed
to `__call__` by name, with the variables as its `params` and the harness's `train` as its own.
"""
from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from comparisons.models.derive import FlaxApply


def flax_apply(flax_model: Any) -> FlaxApply:
    """A Flax *module* (or a model's `.module`) called positionally, as the harness calls a linen module.

    `train` becomes `deterministic=not train`; the attention mask and positions GPT-2's module
    requires are filled per chunk (all-ones mask, positions 0..T-1). `pair` uses `PretrainedCall`
    for a transformers model; this is for a bare linen module.
    """
    module = getattr(flax_model, "module", flax_model)
    required = [name for name, p in inspect.signature(module.__call__).parameters.items()
                if p.default is inspect.Parameter.empty and p.kind is p.POSITIONAL_OR_KEYWORD]
    return FlaxApply(module, train_arg="deterministic", prepare=_filler(required))


def _filler(required: list[str]) -> Callable[[tuple], tuple] | None:
    fillable = {"attention_mask", "position_ids"}
    missing = [n for n in required[1:] if n in fillable]
    if not missing:
        return None

    def prepare(inputs: tuple) -> tuple:
        import jax.numpy as jnp

        ids = inputs[0]
        filled = {"attention_mask": jnp.ones_like(ids),
                  "position_ids": jnp.broadcast_to(jnp.arange(ids.shape[-1]), ids.shape)}
        return (ids, *inputs[1:], *(filled[n] for n in missing[len(inputs) - 1:]))
    return prepare


class PretrainedCall(FlaxApply):
    """A transformers Flax model as the harness calls one: `apply(variables, *inputs, train=, mutable=)`.

    Args:
      model: the transformers Flax model (`_do_init=False` is fine: it is never initialised).
      input_names: the name of each positional input, in torch's `forward` order; each is passed to
        the model's `__call__` by that name.
    `init` traces `init_weights` (under `jax.eval_shape` it compiles nothing). `apply` calls the
    model's `__call__` on a shallow copy whose module is `self.module`, so the harness may swap the
    module (to compute in float64) without touching the user's model.
    """

    def __init__(self, model: Any, input_names: Sequence[str]):
        super().__init__(model.module, train_arg=None)
        self.model, self.input_names = model, tuple(input_names)
        self.full_variables = "batch_stats" in _shape_tree(model)
        # most transformers Flax models take `train`; a few (OPT) take `deterministic` instead
        self.takes_token_types = "token_type_ids" in inspect.signature(type(model).__call__).parameters
        self.flag = "train" if "train" in inspect.signature(type(model).__call__).parameters else "deterministic"

    def _model(self) -> Any:
        model = copy.copy(self.model)
        model._module = self.module  # transformers keeps the module there; `module` is a read-only property
        return model

    def apply(self, variables: Any, *inputs: Any, train: bool = False, mutable: Any = False,
              rngs: Any = None) -> Any:
        """The model's `__call__` on `inputs` by name; (out, updates) when `mutable` asks for updates."""
        named = self._torch_fills(dict(zip(self.input_names, inputs, strict=True)))
        params = dict(variables) if self.full_variables else variables["params"]
        extra = {"dropout_rng": rngs["dropout"]} if rngs and "dropout" in rngs else {}
        flag = {self.flag: train if self.flag == "train" else not train}
        result = self._model()(**named, params=params, **flag, **extra)
        if not mutable:
            return result
        # transformers' models with batch statistics return (out, {'batch_stats': ...}) when train
        return result if self.full_variables and train else (result, {})

    __call__ = apply

    def _torch_fills(self, named: dict) -> dict:
        """The inputs with what torch's `forward` fills and this `__call__` would fill otherwise.

        torch fills a missing `token_type_ids` with zeros (its zero buffer); transformers' Flax Electra
        fills ones, which selects the other token-type row and changes every output (|d| 0.24)."""
        if "token_type_ids" in named or "input_ids" not in named or not self.takes_token_types:
            return named
        import jax.numpy as jnp

        return {**named, "token_type_ids": jnp.zeros_like(named["input_ids"])}

    def init(self, rngs: Any, *inputs: Any) -> Any:
        """The model's variables, from its own `init_weights` (trace it under `jax.eval_shape`)."""
        import jax

        key = rngs if not isinstance(rngs, dict) else rngs["params"]
        tree = self.model.init_weights(key, self.model.input_shape)
        tree = jax.tree.map(lambda leaf: leaf, dict(tree))
        return tree if "params" in tree else {"params": tree}

    def __repr__(self) -> str:
        return f"PretrainedCall({type(self.model).__name__}, inputs={list(self.input_names)})"


def _shape_tree(model: Any) -> dict:
    tree = model.params_shape_tree if not getattr(model, "_is_initialized", True) else model.params
    return dict(tree)


def call_signature(model: Any) -> list[str]:
    """The names a transformers model's `forward` / `__call__` takes, in order (self excluded)."""
    function = model.forward if hasattr(model, "forward") else model.__call__
    return [n for n, p in inspect.signature(function).parameters.items()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
