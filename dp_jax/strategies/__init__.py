"""The four ways dp_jax runs one replica per device, all with torch's chunking and replica-0 state.

- 'explicit': the four pipeline steps (scatter, replicate, parallel_apply, gather); one jitted call
  per device, unequal chunks allowed, devices may repeat.
- 'pmap': `jax.pmap` over the replicas (in JAX >= 0.8 a jit of shard_map).
- 'sharded': `jax.jit` of `jax.vmap` over a (replica, row) reshaped batch sharded with NamedSharding;
  vmap keeps each replica's computation (BatchNorm statistics, dropout) its own.
- 'shard_map': `jax.jit(jax.shard_map(..., check_vma=False))`, the per-device view.
Every strategy computes on exactly torch's chunks: on an uneven batch the mapped three run one
program in which each device computes its own chunk, the short last one on its rows alone
(`switch`; see ShardPlan). With uneven='pad' they pad the last chunk instead, as a pmap port
does, and refuse what that visibly changes.

Layout: `table` (one `Strategy` record per name, the mapped programs' builders), `plan`
(ShardPlan: who runs which rows, and how), `inputs` (split, lay out and place the batch), `switch`
(the program of an uneven batch), `traced` (a mapped strategy inside jax.jit), `padding`
(what uneven='pad' refuses), `unpad` (gather the mapped outputs), `cache` (placed variables),
`explicit` and `mapped` (the two ways to run), `run` (run_strategy, place_call, place_variables: by a
strategy's kind, one or the other).
"""
from dp_jax.strategies.cache import ReplicaCache
from dp_jax.strategies.call import StrategyCall, StrategyResult, reduce_collections, replica_keys
from dp_jax.strategies.mesh import REPLICA_AXIS
from dp_jax.strategies.plan import UNEVEN_MODES, ReplicaPlacement, ShardPlan, check_uneven, plan_shards
from dp_jax.strategies.run import place_call, place_variables, run_strategy
from dp_jax.strategies.table import MAPPED_STRATEGIES, STRATEGIES, Strategy, lookup

__all__ = [
    "MAPPED_STRATEGIES", "REPLICA_AXIS", "STRATEGIES", "UNEVEN_MODES", "ReplicaCache",
    "ReplicaPlacement", "ShardPlan", "check_uneven",
    "Strategy", "StrategyCall", "StrategyResult", "lookup", "place_call", "place_variables", "plan_shards",
    "reduce_collections", "replica_keys", "run_strategy",
]
