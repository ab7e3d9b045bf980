"""`JaxSide`: what a pair's JAX side provides to the harness, declared once; one file per kind implements it.

    jax_linen.py       a flax.linen Module (the built-in pairs, `pair_from_modules` on a linen model)
    jax_flax_apply.py  a `FlaxApply` (Hugging Face's Flax models through comparisons.hf, any model called
                       with its own training flag)
    traced/jax_side.py the torch model traced by torchax, in a worker process (comparisons.traced)

A new kind of JAX side is one new file beside these, a class with the members below, and the pairs that
use it name it (`ModelPair.jax_side`). The harness asks these members and nothing else of a pair's JAX side.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Protocol

import numpy as np


class Built(NamedTuple):
    """A pair built: the torch module, the JAX model the harness runs (None when the side runs in a worker
    process) and its variables, holding the torch module's weights."""

    torch: Any
    flax: Any
    variables: dict


class JaxSide(Protocol):
    """What the harness asks of a pair's JAX side.

    Attributes:
      in_worker: the side runs in another process: the harness hands it the whole JAX half (`run_in_worker`)
        instead of running `Built.flax` through comparisons.runs, and measures no padding there.
      captures_layers: the layer view can record its layers in this process (a Flax interceptor sees them).
      computes_in_run_dtype: every run, the compared one too, uses `computing_in(model, dtype)`, not only the
        float64 reference (NNX: layers fix their dtype at construction, so a float64 run would keep float32).
    """

    in_worker: bool
    captures_layers: bool
    computes_in_run_dtype: bool

    def make(self, pair: Any) -> Any:
        """The JAX model of `pair`, checked (None when it is made in a worker process)."""
        ...

    def convert(self, pair: Any, torch_module: Any, model: Any, dtype: Any) -> dict:
        """`torch_module`'s weights as `model`'s variables in `dtype` (host copies)."""
        ...

    def computing_in(self, model: Any, dtype: str) -> Any:
        """`model` computing in `dtype` (a model with its own compute dtype is cloned; else `model` itself)."""
        ...

    def run_in_worker(self, pair: Any, run: Any, strategies: list[str], devices: int, float64: bool
                      ) -> tuple[list, Any]:
        """Every strategy's BackendRun and (with `float64`) the float64 reference's JAX Snapshot, run in the
        worker process; only a side with `in_worker` is asked."""
        ...


def build(side: JaxSide, pair: Any, seed: int, dtype: Any) -> Built:
    """`pair` built through `side`: its torch module (under `torch.manual_seed(seed)`, in `dtype`), its JAX
    model and the torch weights converted to it."""
    torch_module = pair.build_torch(seed, dtype)
    model = side.make(pair)
    if side.computes_in_run_dtype:
        model = side.computing_in(model, str(np.dtype(dtype)))
    return Built(torch_module, model, side.convert(pair, torch_module, model, dtype))


def make_flax_model(pair: Any, made: Any = None) -> Any:
    """`pair.make_flax()`, checked to be a model with `init` and `apply` (a linen Module or a FlaxApply);
    `made`: what make_flax() returned already."""
    model = pair.make_flax() if made is None else made
    pair.check_made("make_flax", model, callable(getattr(model, "init", None)) and callable(
        getattr(model, "apply", None)), "flax.linen.Module, an NNX Module nor a FlaxApply; return the Flax model, e.g. "
        "make_flax=lambda: MyNet()")
    return model


def convert_flax(pair: Any, torch_module: Any, model: Any, dtype: Any) -> dict:
    """The given variables (`pair.variables`, converted by another tool) or the torch weights converted by
    `pair.mapping`, checked against the shapes of the model's own init (traced, not compiled)."""
    if pair.variables is not None:
        return given_variables(pair.variables, dtype)
    return pair.torch_to_flax(torch_module.state_dict(), like=pair.flax_shapes(model))


def linen_in(module: Any, dtype: str) -> Any:
    """A linen Module with a `dtype` field (Hugging Face's compute in float32 unless told) cloned to `dtype`."""
    import dataclasses

    if dataclasses.is_dataclass(module) and "dtype" in {f.name for f in dataclasses.fields(module)}:
        return module.clone(dtype=dtype)
    return module


def given_variables(variables: Any, dtype: Any) -> dict:
    """Variables converted elsewhere as {'params': ..., ...} numpy trees in `dtype` (a copy).

    transformers returns a bare params tree for models without BatchNorm; it is wrapped.
    """
    import jax

    tree = dict(variables)
    if "params" not in tree:
        tree = {"params": tree}
    return jax.tree.map(lambda leaf: np.array(leaf, dtype=dtype if np.issubdtype(np.asarray(leaf).dtype, np.floating)
                                              else None, copy=True), tree)
