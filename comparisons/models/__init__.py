"""Paired models: the same network in PyTorch and in Flax, with a weight mapping between them.

`get(name)` returns a built-in or user-registered `ModelPair`; `register(pair)` adds one.
Nothing here imports torch or JAX until a pair's model is made.
"""
from .builtin import BUILTIN as _BUILTIN
from .pair import ModelPair, get, names, register

for _pair in _BUILTIN:
    register(_pair)

__all__ = ["ModelPair", "get", "names", "register"]
