"""The floor: a hand-written training step, `jax.jit` with NamedSharding, no dp_jax in it.

Params, optimizer state and collections replicated (`P()`), resident and donated; the batch split along its
batch axis over a one-axis mesh (`P('data')`), placed from the host on every call as a training loop
places it. The bench times every JAX side against it, and `benchmarks/train_step.py` times dp_jax's
compiled step against the same code: one implementation of the floor.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

GradFn = Callable[..., Any]  # (params, collections, x, y) -> ((loss, (output, updated collections)), grads)


@dataclasses.dataclass(frozen=True)
class ShardedStep:
    """One compiled step `(params, opt_state, collections, x, y) -> (params, opt_state, collections, loss)`.

    `place` puts a state tree where the step keeps it (replicated); a call places the batch itself.
    Compiles once per shapes on its first call.
    """

    jitted: Callable[..., tuple]
    replicated: Any
    rows: Any

    def place(self, tree: Any) -> Any:
        """`tree` copied onto every device of the mesh (what the step donates and returns)."""
        import jax
        import numpy as np

        return jax.device_put(jax.tree.map(np.asarray, tree), self.replicated)

    def __call__(self, params: Any, opt_state: Any, collections: Any, x: Any, y: Any) -> tuple:
        import jax

        return self.jitted(params, opt_state, collections, jax.device_put(x, self.rows), jax.device_put(y, self.rows))


def sharded_train_step(grad_fn: GradFn, tx: Any, devices: Sequence[Any], batch_dim: int = 0) -> ShardedStep:
    """The floor over `devices` for `grad_fn` and the optax transformation `tx`; `batch_dim` is where the
    batch's rows are (the batch must split evenly over the devices: `floor_devices` picks them)."""
    import jax
    import numpy as np
    import optax
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = Mesh(np.array(list(devices)), ("data",))
    replicated = NamedSharding(mesh, P())

    def body(params, opt_state, collections, x, y):
        (loss, (_, updated)), grads = grad_fn(params, collections, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, {**collections, **updated}, loss

    jitted = jax.jit(body, donate_argnums=(0, 1, 2), out_shardings=replicated)
    return ShardedStep(jitted, replicated, NamedSharding(mesh, P(*([None] * batch_dim), "data")))


def floor_devices(devices: Sequence[Any], batch_size: int) -> list:
    """The most of `devices` (a prefix) that `batch_size` rows split over evenly: NamedSharding splits only
    evenly, so batch 10 on 4 devices runs the floor on 2."""
    count = max(n for n in range(1, len(devices) + 1) if batch_size % n == 0)
    return list(devices[:count])
