"""Paired models: the same network in PyTorch and in Flax, with a weight mapping between them.

`get(name)` returns a built-in or user-registered `ModelPair`; `register(pair)` adds one;
`pair_from_modules` builds one from a torch module and a Flax model you already have.
Nothing here imports torch or JAX until a pair's model is made. The registry starts with the built-in
pairs: `builtin` registers them when this package imports it.
"""
from . import builtin  # noqa: F401  (registers the built-in pairs)
from .declared import frozen_leaves, padding_rows
from .derive import FlaxApply, derive_mapping, pair_from_modules, tied_parameters
from .jax_side import Built, JaxSide
from .pair import KNOWN_DIFFERENCES, ModelPair, get, names, register

__all__ = ["KNOWN_DIFFERENCES", "Built", "FlaxApply", "JaxSide", "ModelPair", "derive_mapping", "frozen_leaves",
           "get", "names", "padding_rows", "pair_from_modules", "register", "tied_parameters"]
