"""DataParallel for Flax: torch's nn.DataParallel for an NNX Module, a linen Module or any apply function.

The JAX twin of dp_torch/data_parallel.py. One call scatters the inputs in torch-sized chunks,
runs one replica per device with the chosen strategy, and gathers the outputs on output_device.
State follows torch: the updated collections (BatchNorm batch_stats) are replica 0's, i.e.
computed from chunk 0 only, unless `sync_collections=True` asks for their mean over replicas.

An NNX module is called as torch's: `DataParallel(model, ...)(x)`; the state a replica changes
(replica 0's BatchStat in train mode, its RNG counts) is written back into `model` (dp_jax/nnx.py).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax

from dp_jax import nnx as nnx_support
from dp_jax import training
from dp_jax._batch import check_batch_size, check_dim
from dp_jax._caches import module_cache
from dp_jax._devices import device_label, resolve_device, resolve_devices
from dp_jax._errors import UsageError, UsageTypeError
from dp_jax.nnx_training import NNXTrainStep
from dp_jax.strategies import (
    MAPPED_STRATEGIES,
    REPLICA_AXIS,
    ReplicaCache,
    ReplicaPlacement,
    ShardPlan,
    StrategyCall,
    check_uneven,
    lookup,
    place_call,
    place_variables,
    plan_shards,
    run_strategy,
    traced,
)


class DataParallel:
    """Run a Flax model data-parallel over `device_ids` (default: all of jax.devices()).

    Args:
      module_or_apply_fn: an NNX Module (called as `dp(*args)`, its changed state written back), a
        linen Module (its `apply` is used) or any `fn(variables, *args, **kwargs)`; for the last two
        `mutable=` and `rngs=` are passed to it only when given, as flax's Module.apply takes them.
      device_ids: jax.Devices or indices into jax.devices(); 'explicit' allows repeats.
      output_device: where the output is gathered (default device_ids[0]; "cpu" allowed). With a
        single device the output stays on it, as in torch.
      dim: the batch dimension of every input and output array.
      strategy: 'explicit' | 'pmap' | 'sharded' | 'shard_map' (see docs/strategies.md).
      sync_collections: return the mean over replicas of updated floating collections instead of
        replica 0's (a cheap, approximate SyncBatchNorm: the mean of per-chunk variances).
      axis_name: name the replica axis, so collectives in the model (BatchNorm(axis_name=...),
        lax.pmean) span every replica: true SyncBatchNorm. Not with 'explicit', nor with a batch
        that splits into unequal chunks (a pmean would weigh the short chunk as a full one; the
        error names the fix).
      uneven: 'exact' (default): every replica computes on exactly its torch chunk; a mapped
        strategy runs an uneven batch as one program in which the short last chunk's device
        computes its rows alone (one compile per batch shape, as an even batch). 'pad' (mapped
        strategies): pad the last chunk as a pmap port does, refusing collections, rngs,
        collectives and outputs that do not grow with the chunk; a model that mixes rows
        (BatchNorm, attention over the batch) still changes silently (docs/uneven_batches.md).
        'pad_unchecked': pad and refuse nothing, to measure what padding changes (the harness does).
    The variables placed on the devices are cached (last two, by leaf identity), so a second call
    with the same variables sends nothing; `.cache.clear()` frees them.
    """

    def __init__(
        self, module_or_apply_fn: nn.Module | Callable[..., Any], device_ids: Sequence[Any] | None = None,
        output_device: Any = None, dim: int = 0, strategy: str = "explicit", *,
        sync_collections: bool = False, axis_name: str | None = None, uneven: str = "exact",
    ):
        self.module = module_or_apply_fn if nnx_support.is_nnx_module(module_or_apply_fn) else None
        self.apply_fn = None if self.module is not None else _apply_fn_of(module_or_apply_fn)
        dim = check_dim(dim, "DataParallel")
        self.device_ids = tuple(resolve_devices(jax.devices() if device_ids is None else device_ids, "device_ids"))
        self.output_device = (self.device_ids[0] if output_device is None
                              else resolve_device(output_device, "output_device", allow_cpu_literal=True))
        self.record = lookup(strategy, axis_name)  # raises for an unknown name or an unbindable axis_name
        check_uneven(uneven, strategy)
        self.dim, self.strategy, self.uneven = dim, strategy, uneven
        self.sync_collections, self.axis_name = sync_collections, axis_name
        self.cache = ReplicaCache(maxsize=2)
        self.last_plan: ShardPlan | None = None

    def apply(self, variables: Any, *args: Any, mutable: Any = False, rngs: dict | None = None, **kwargs: Any) -> Any:
        """Like flax's Module.apply, data-parallel: returns out, or (out, updated_collections) if mutable.

        Each replica i gets rngs {name: jax.random.fold_in(key, i)}. Transfers the chunks, the
        variables (first call only, while cached) and the output; compiles once per input shapes.
        Inside jax.jit (mapped strategies) it places with shardings on the mesh of device_ids instead,
        and the output comes back replicated (P()) on every device (docs/training.md).
        """
        self._refuse_nnx("apply", "call dp(x) (torch's form); the module's own state is used and updated")
        if rngs is not None and not isinstance(rngs, dict):
            raise UsageTypeError(f"rngs must be a dict of PRNG keys, e.g. {{'dropout': jax.random.key(0)}}, "
                            f"not a {type(rngs).__name__}")
        call = self._call(_replica_fn(self.apply_fn, _hashable_filter(mutable)), variables, args, kwargs,
                          rngs=rngs, updates_collections=bool(mutable))
        if traced.is_traced(variables, args, kwargs, rngs):  # under jax.jit: no buffers to commit
            output, collections = traced.run(self.record, call)
        else:
            result = run_strategy(self.record, call)
            self.last_plan = result.plan
            output, collections = result.output, result.collections
        return (output, collections) if mutable else output

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """NNX: `dp(*inputs, **kwargs)` as torch's, the model's changed state written back; otherwise `apply`."""
        if self.module is not None:
            return self._call_module(args, kwargs)
        return self.apply(*args, **kwargs)

    def _call_module(self, args: tuple, kwargs: dict) -> Any:
        """`dp(*args, **kwargs)` for an NNX module: one data-parallel call, the changed state written back.

        Costs a walk of the module (nnx.split, once per call) besides the strategy's own transfers and compiles.
        """
        model = self.module
        nnx_support.check_call_kwargs(model, kwargs)
        split = nnx_support.split_module(model, "DataParallel")
        # pad mode refuses rngs and updated state up front; an eval-mode module draws nothing and changes nothing
        train = nnx_support.train_mode_of(model, split.replica_fn)
        rngs = split.keys if split.keys and (train or self.uneven == "exact") else None
        variables = split.variables if rngs is not None else nnx_support.all_leaves(split)
        replica_fn = split.replica_fn if rngs is not None else split.replica_fn.without_keys()
        call = self._call(replica_fn, variables, args, kwargs, rngs=rngs, updates_collections=train)
        if traced.is_traced(variables, args, kwargs, rngs):
            output, changed = traced.run(self.record, call)
        else:
            result = run_strategy(self.record, call)
            self.last_plan = result.plan
            output, changed = result.output, result.collections
        nnx_support.write_back(model, split, changed)
        return output

    def _refuse_nnx(self, method: str, fix: str) -> None:
        if self.module is not None:
            raise UsageTypeError(f"DataParallel.{method} takes a variables argument, but this DataParallel wraps an "
                                 f"NNX module ({type(self.module).__name__}), which holds its own state: {fix}")

    def __repr__(self) -> str:
        """As torch's: the wrapped module, indented; then where it runs (devices, output device, dim, strategy)."""
        module = self.apply_fn.module if isinstance(self.apply_fn, _LinenApply) else self.module or self.apply_fn
        devices = ", ".join(device_label(device) for device in self.device_ids)
        axis = f", axis_name={self.axis_name!r}" if self.axis_name else ""
        return (f"DataParallel(\n  (module): {repr(module).replace(chr(10), chr(10) + '  ')}\n"
                f"  device_ids=[{devices}], output_device={device_label(self.output_device)}, dim={self.dim}, "
                f"strategy={self.strategy!r}{axis}\n)")

    def value_and_grad(self, loss_fn: Callable[..., Any], has_aux: bool = False) -> training.CompiledStep:
        """A jitted `(variables, *batch) -> (loss, grads)` (`((loss, aux), grads)` with has_aux).

        `loss_fn(variables, *batch)` calls this wrapper's `apply` (the loss on the gathered output, as
        in torch); grads are of `variables`, replicated on every device like the loss. The step places
        its arguments (variables replicated, every batch array in torch's chunks along dim); compiles
        once per (shapes, devices). Mapped strategies only. See docs/training.md.
        """
        self._refuse_nnx("value_and_grad", "use nnx.value_and_grad of a loss on DataParallel(model)(x), or train_step")
        return training.value_and_grad(loss_fn, self._step_placement("value_and_grad"), has_aux)

    def train_step(self, tx: Any, loss_fn: Callable[..., Any], *, has_aux: bool = False,
                   return_grads: bool = False) -> training.CompiledStep:
        """A jitted `(params, opt_state, collections, *batch) -> (params, opt_state, collections, loss)`.

        One step of PyTorch's loop (loss on the gathered output, backward, optimizer.step()) for an optax
        GradientTransformation `tx`: `loss_fn({"params": params, **collections}, *batch)` returns the
        loss, or with has_aux (loss, updated collections) from `apply(..., mutable=[...])`. params,
        opt_state and collections stay resident, replicated, and are donated: pass each step the ones
        the last step returned. Compiles once per (shapes, devices). Mapped strategies only.

        return_grads: the step also returns the gradients of params it updated with (summed over replicas,
        replicated, not donated), after the loss: for logging a gradient norm, or checking the step,
        without compiling a second `value_and_grad` program. Costs one more output buffer per parameter.

        NNX module: `step = dp.train_step(tx, loss_fn)` with `loss_fn(dp, *batch)` calling `dp(x)`; then
        `loss = step(*batch)` (or `(loss, grads)`) updates the module in place, as
        `nnx.Optimizer(model, tx, wrt=nnx.Param).update(model, grads)` would; `step.opt_state` holds
        the optimizer state (dp_jax/nnx.py, NNXTrainStep).
        """
        if self.module is not None:
            if has_aux:
                raise UsageError("DataParallel(nnx module).train_step: has_aux is linen's (loss, collections); an "
                                 "NNX module updates its own state, so loss_fn returns the loss only")
            return NNXTrainStep(self, tx, loss_fn, self._step_placement("train_step"), return_grads)
        return training.train_step(tx, loss_fn, self._step_placement("train_step"), has_aux, return_grads)

    def _step_placement(self, method: str) -> training.Placement:
        if not self.record.mapped:
            raise UsageError(
                f"DataParallel.{method} compiles one program over the mesh of device_ids, but strategy="
                f"{self.strategy!r} runs each replica as its own call; use strategy="
                f"{' or '.join(map(repr, MAPPED_STRATEGIES))} (explicit trains eagerly: jax.grad around apply)")
        return training.placement_for(self.device_ids, self.axis_name or REPLICA_AXIS, self.dim)

    def place(self, variables: Any, batch_size: int | None = None) -> Any:
        """Send `variables` to the devices a batch of `batch_size` rows uses (default: all), ahead of apply.

        Transfers once; later calls with the same variables (and replica count) reuse the copies.
        Returns the placed copies (a list per device for 'explicit'; for a mapped strategy one
        P()-replicated array per leaf over the devices).
        """
        self._refuse_nnx("place", "the module's state is placed by the call itself")
        rows = check_batch_size(batch_size, "DataParallel.place")
        plan = self._plan(len(self.device_ids) if rows is None else rows)
        return place_variables(self.record, variables, plan, self.cache, self.axis_name or REPLICA_AXIS)

    def placed(self, variables: Any, *args: Any, **kwargs: Any) -> ReplicaPlacement:
        """Where `apply(variables, *args, **kwargs)` puts things: per-replica variables and inputs, and the plan.

        Places (copies) like apply, through the same cache, but runs no model. The arrays reported
        for a mapped strategy are views of the very buffers it passes its program (the variables'
        stay cached for the next apply; inputs are sent again on each call). Pass no mutable/rngs.
        """
        self._refuse_nnx("placed", "see dp_jax.replicate(model, devices) for where each replica's state sits")
        return place_call(self.record, self._call(_replica_fn(self.apply_fn, False), variables, args, kwargs))

    def _call(self, replica_fn: Any, variables: Any, args: tuple, kwargs: dict, *, rngs: dict | None = None,
              updates_collections: bool = False) -> StrategyCall:
        # torch's one-device shortcut: the output stays on device_ids[0]
        output_device = self.device_ids[0] if len(self.device_ids) == 1 else self.output_device
        return StrategyCall(replica_fn=replica_fn, variables=variables, args=tuple(args), kwargs=dict(kwargs),
                            devices=self.device_ids, output_device=output_device, dim=self.dim, rngs=rngs,
                            cache=self.cache, updates_collections=updates_collections,
                            sync_collections=self.sync_collections, axis_name=self.axis_name, uneven=self.uneven)

    def plan(self, batch_size: int | None) -> ShardPlan:
        """The ShardPlan a batch of `batch_size` rows would get (devices, chunk sizes, how each replica runs)."""
        return self._plan(check_batch_size(batch_size, "DataParallel.plan"))

    def _plan(self, batch_size: int | None) -> ShardPlan:
        return plan_shards(batch_size, self.device_ids, self.strategy, self.uneven)


def data_parallel(
    apply_fn: Callable[..., Any], variables: Any, inputs: Any, device_ids: Sequence[Any] | None = None,
    output_device: Any = None, dim: int = 0, *, module_kwargs: dict | None = None, strategy: str = "explicit",
    uneven: str = "exact",
) -> Any:
    """Functional DataParallel: apply_fn(variables, *inputs, **module_kwargs) over device_ids.

    `inputs` that is not a tuple is one argument; None means none. Like torch's data_parallel it
    places the variables on every call (no cache); compiled programs are still reused. torch's
    positional order up to `dim` (with `variables` after the function); the rest by keyword.
    """
    nnx_support.refuse_nnx(apply_fn, "data_parallel(apply_fn=...)",
                           "a function takes a variables argument: call DataParallel(model, device_ids, ...)"
                           "(*inputs), as torch's module form")
    inputs = () if inputs is None else inputs if isinstance(inputs, tuple) else (inputs,)
    wrapper = DataParallel(apply_fn, device_ids, output_device, dim, strategy, uneven=uneven)
    return wrapper.apply(variables, *inputs, **(module_kwargs or {}))


@dataclasses.dataclass(frozen=True)
class _LinenApply:
    """`module.apply` as a value equal for equal modules (a bound method compares by identity), so a
    rebuilt but identical module reuses the compiled programs."""

    module: nn.Module

    def __call__(self, variables: Any, *args: Any, **kwargs: Any) -> Any:
        return self.module.apply(variables, *args, **kwargs)

    def __hash__(self) -> int:
        try:
            return hash(self.module)
        except TypeError:  # a module with an unhashable field: cache by identity, as a bound method would
            return id(self.module)


def _apply_fn_of(module_or_apply_fn: Any) -> Callable[..., Any]:
    if isinstance(module_or_apply_fn, nn.Module):
        return _LinenApply(module_or_apply_fn)
    if not callable(module_or_apply_fn):
        raise UsageTypeError(f"module_or_apply_fn={module_or_apply_fn!r} is neither a linen Module nor callable; "
                        "pass a Module or fn(variables, *args, **kwargs) (for NNX: see this module's docstring)")
    return module_or_apply_fn


def _hashable_filter(mutable: Any) -> Any:
    """flax collection filters as hashable values (a list of names becomes a tuple)."""
    return tuple(mutable) if isinstance(mutable, list) else mutable


@module_cache(maxsize=256)
def _replica_fn(apply_fn: Callable[..., Any], mutable: Any) -> Callable[..., tuple[Any, Any]]:
    """One hashable replica function per (apply_fn, mutable), so every strategy's jit cache hits."""
    def replica(variables, rngs, args, kwargs):
        flax_kwargs = ({"mutable": mutable} if mutable else {}) | ({"rngs": rngs} if rngs is not None else {})
        result = apply_fn(variables, *args, **kwargs, **flax_kwargs)
        return result if mutable else (result, {})
    return replica
