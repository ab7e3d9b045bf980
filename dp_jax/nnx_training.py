"""The compiled training step of an NNX module: dp_jax's linen step around a functional split/merge.

`DataParallel(nnx_model).train_step(tx, loss_fn)` returns an `NNXTrainStep`; see its docstring.
"""
from __future__ import annotations

from typing import Any

import jax

from dp_jax import training
from dp_jax.nnx import SplitModule, by_path, leaves_after, split_module, with_module, write_back

# --- DataParallel(nnx_module).train_step(tx, loss_fn) --------------------------------------------


class NNXTrainStep:
    """`step(*batch) -> loss`: one compiled data-parallel training step of an NNX module, in place.

    The update equals `nnx.Optimizer(model, tx, wrt=nnx.Param).update(model, grads)` on one device:
    `loss_fn(dp, *batch)` calls `dp(x)` (a DataParallel of the traced module, same options), the
    gradients of the module's nnx.Param leaves are summed over replicas, and `tx` updates them. The
    module's params and changed state (BatchStat, RNG counts) are written back after each step and
    `opt_state` is kept here. One `jax.jit` program per (module structure, batch shapes): the module is
    split and merged functionally (graph mode) around it, never through nnx.jit. Its state is donated
    and replaced by the step's outputs, so the module holds the new arrays.
    """

    def __init__(self, dp: Any, tx: Any, loss_fn: Any, placement: Any, return_grads: bool = False):
        training.check_transformation(tx)
        self.dp, self.tx, self.loss_fn, self.placement = dp, tx, loss_fn, placement
        self.return_grads = return_grads
        split = split_module(dp.module, "DataParallel.train_step")
        self.opt_state = tx.init(by_path(split, split.params, split.replica_fn.leaves(split.variables, split.keys)))
        self._steps: dict[Any, Any] = {}

    def __call__(self, *batch: Any) -> Any:
        split = split_module(self.dp.module, "DataParallel.train_step")
        leaves = split.replica_fn.leaves(split.variables, split.keys)
        state_slots = split.state_slots
        step = self._steps.get(split.replica_fn)
        if step is None:
            step = self._steps[split.replica_fn] = self._compile(split, state_slots)
        keys = {slot: jax.random.key_data(key) for slot, key in split.keys.items()}
        collections = {"state": by_path(split, state_slots, leaves), "keys": keys}
        params, self.opt_state, collections, loss, *grads = step(
            by_path(split, split.params, leaves), self.opt_state, collections, *batch)
        changed = {slot: params[split.paths[slot]] for slot in split.params}
        changed |= {slot: collections["state"][split.paths[slot]] for slot in state_slots}
        changed |= {int(slot): jax.random.wrap_key_data(data, impl=jax.random.key_impl(split.keys[slot]))
                    for slot, data in collections["keys"].items()}
        write_back(self.dp.module, split, changed)
        return (loss, grads[0]) if self.return_grads else loss

    def _compile(self, split: SplitModule, state_slots: tuple[int, ...]) -> Any:
        """The CompiledStep of this module structure: dp_jax's linen train step around a split/merge loss."""
        replica, paths, dp, loss_fn = split.replica_fn, split.paths, self.dp, self.loss_fn
        impls = {slot: jax.random.key_impl(key) for slot, key in split.keys.items()}

        def loss_of(variables: dict, *batch: Any) -> tuple[Any, dict]:
            leaves = [None] * replica.treedef.num_leaves
            for slot in split.params:
                leaves[slot] = variables["params"][paths[slot]]
            for slot in state_slots:
                leaves[slot] = variables["state"][paths[slot]]
            for slot, data in variables["keys"].items():
                leaves[int(slot)] = jax.random.wrap_key_data(data, impl=impls[slot])
            model = replica.merge(leaves)
            loss = loss_fn(with_module(dp, model), *batch)
            after = {**leaves_after(model, replica.treedef)}
            return loss, {"state": {paths[slot]: after[slot] for slot in state_slots}}

        return training.train_step(self.tx, loss_of, self.placement, has_aux=True, return_grads=self.return_grads)

    def compiles(self) -> int:
        """Programs compiled so far by this step's calls (one per module structure and batch shapes)."""
        return sum(step.compiles() for step in self._steps.values())
