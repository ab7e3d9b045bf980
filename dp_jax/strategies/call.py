"""One data-parallel call as a value (`StrategyCall`), what a strategy returns, and the helpers all share."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from dp_jax._errors import UsageTypeError
from dp_jax.strategies.cache import ReplicaCache
from dp_jax.strategies.mesh import REPLICA_AXIS
from dp_jax.strategies.plan import ShardPlan

# fn(variables, rngs, args, kwargs) -> (output, updated collections); must be hashable (it keys the jit cache).
ReplicaFn = Callable[[Any, "dict | None", tuple, dict], tuple[Any, Any]]


@dataclasses.dataclass(frozen=True, eq=False, kw_only=True)
class StrategyCall:
    """Everything one data-parallel call needs, fixed for the call; every strategy takes one.

    Built with keywords only: two adjacent bools (updates_collections, sync_collections) cannot swap.

    Attributes:
      replica_fn: fn(variables, rngs, args, kwargs) -> (output, collections), hashable.
      variables, args, kwargs: what replica i is applied to (arrays in args/kwargs split along dim).
      devices: the device list (`device_ids`); replica i runs on devices[i].
      output_device: where the output is gathered (a single device list keeps it there, as torch).
      dim: the batch dimension of every split input and gathered output.
      rngs: {name: key}; replica i gets fold_in(key, i).
      cache: the placed-variables cache (a size-0 cache places on every call).
      updates_collections: the call returns updated (mutable) collections.
      sync_collections: return the mean over replicas of floating collections instead of replica 0's.
      axis_name: the name the replica axis is bound to for collectives (mapped strategies only).
      uneven: 'exact' (no padding row enters a computation) or 'pad' (mapped strategies pad the
        last chunk and refuse what that would visibly change).
    """

    replica_fn: ReplicaFn
    variables: Any
    args: tuple
    kwargs: dict
    devices: tuple[jax.Device, ...]
    output_device: jax.Device
    dim: int = 0
    rngs: dict | None = None
    cache: ReplicaCache = dataclasses.field(default_factory=lambda: ReplicaCache(maxsize=0))
    updates_collections: bool = False
    sync_collections: bool = False
    axis_name: str | None = None
    uneven: str = "exact"

    @property
    def mesh_axis(self) -> str:
        """The name of the replica axis: axis_name, or a private default when none is bound."""
        return self.axis_name or REPLICA_AXIS


class StrategyResult(NamedTuple):
    """What a strategy returns: the gathered output, the chosen collections, and the plan it ran."""

    output: Any
    collections: Any
    plan: ShardPlan


def replica_keys(rngs: dict | None, replicas: int) -> dict | None:
    """{name: keys} with keys[i] = jax.random.fold_in(rngs[name], i): one stream per replica."""
    if not rngs:
        return None
    fold = jax.vmap(jax.random.fold_in, in_axes=(None, 0))
    keys = {}
    for name, key in rngs.items():
        try:
            keys[name] = fold(key, jnp.arange(replicas))
        except (TypeError, ValueError):  # JAX's message names neither rngs nor the stream
            shown = f"{type(key).__name__} of shape {key.shape}" if hasattr(key, "shape") else repr(key)
            raise UsageTypeError(
                f"rngs[{name!r}] is not a PRNG key (got {shown}); pass rngs={{{name!r}: jax.random.key(seed)}} "
                "or a key from jax.random.split"
            ) from None
    return keys


def reduce_collections(stacked: Any, replicas: int, sync: bool) -> Any:
    """Replica 0's collections from a (n, ...) stacked pytree, or (sync) the mean of its floating leaves
    over the first `replicas` entries, the replicas that ran. Moves nothing: the eager runners
    place `stacked` first, the traced runner calls it inside its trace.

    Replica 0's pick is one jitted copy of the whole tree (one program per tree of shapes, inlined in
    a trace), not one eager slice per leaf shape: a copy, so bitwise the leaves themselves."""
    if not sync:
        return _replica_zero(stacked) if jax.tree.leaves(stacked) else stacked

    def pick(leaf):
        if jnp.issubdtype(leaf.dtype, jnp.inexact):
            return jnp.mean(leaf[:replicas], axis=0).astype(leaf.dtype)
        return leaf[0]
    return jax.tree.map(pick, stacked)


@jax.jit
def _replica_zero(stacked: Any) -> Any:
    """Entry 0 of every (n, ...) leaf of `stacked`."""
    return jax.tree.map(lambda leaf: leaf[0], stacked)
