"""ReplicaCache: send the variables to the devices once, then reuse the copies.

torch's DataParallel broadcasts its parameters on every forward. Here a wrapper remembers the
placed copies of the last variables it saw (matched by the identity of every leaf, so new arrays
after an optimiser step miss the cache), and a second call with the same variables sends nothing.
Traced variables (under jax.grad / jax.jit) are never cached: they are placed inside the trace,
which is what makes gradients flow back to the caller's device.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

import jax

from dp_jax._devices import is_concrete_array


class ReplicaCache:
    """A small LRU of placed variables, keyed on (leaf identities, placement key).

    Holds strong references to the source leaves so an id cannot be reused while cached.
    """

    def __init__(self, maxsize: int = 2):
        self.maxsize = maxsize
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[Hashable, tuple[list[Any], Any]] = OrderedDict()

    def get(self, variables: Any, placement: Hashable, place: Callable[[Any], Any]) -> Any:
        """Return `place(variables)`, computed once per (variables, placement) while cached."""
        leaves, treedef = jax.tree_util.tree_flatten(variables)
        if not all(is_concrete_array(leaf) for leaf in leaves):
            return place(variables)
        key = (treedef, tuple(map(id, leaves)), placement)
        entry = self._entries.get(key)
        if entry is not None and all(a is b for a, b in zip(entry[0], leaves)):
            self._entries.move_to_end(key)
            self.hits += 1
            return entry[1]
        self.misses += 1
        placed = place(variables)
        self._entries[key] = (leaves, placed)
        while len(self._entries) > self.maxsize:
            self._entries.popitem(last=False)
        return placed

    def clear(self) -> None:
        """Drop every placed copy (frees their device memory once nothing else holds them)."""
        self._entries.clear()
