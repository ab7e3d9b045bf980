"""The compiled data-parallel step: value-and-grad, and an optax update, as one jitted program.

PyTorch's DataParallel trains with `loss = criterion(model(x), y); loss.backward(); opt.step()`:
the loss is computed on the output gathered on output_device and the gradients are summed back
onto the one set of parameters. Here `loss_fn(variables, *batch)` calls `DataParallel.apply`
(which, inside the trace, places by shardings: see strategies' traced runner), and the step is
`jax.jit` of `jax.value_and_grad(loss_fn)` (plus `tx.update` and `optax.apply_updates`) over the
mesh of `device_ids`:

- variables / params and optimizer state: resident, replicated (`P()`) on every device; the
  train step donates them, so each step updates them in place;
- batch: every array split along `dim` into torch's chunks, chunk i on device i (an even batch as
  `P(axis)`; otherwise in slots of ceil(B/n) rows per device, the short chunk's empty slot zeros
  that no computation reads);
- loss and gradients: replicated (the gradient is the sum over replicas of each replica's
  contribution, as torch's backward sums replica gradients onto the parameters).

Arguments are placed by the step itself, once: committed arrays (e.g. on cpu:0) and numpy arrays
are sent to the mesh before the jitted call (a leaf already there is not sent again). Compiles
once per (shapes, dtypes, devices); a repeated step compiles nothing.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from dp_jax._batch import labelled_leaves, wrap_dim
from dp_jax._caches import module_cache
from dp_jax._errors import UsageError, UsageTypeError
from dp_jax._jax_compat import count_backend_compiles
from dp_jax.scatter_gather import chunk_sizes
from dp_jax.strategies.mesh import mesh_of, spec_at
from dp_jax.strategies.switch import lay_out_slots, merge_slots


class Placement:
    """Where a compiled step keeps things on the mesh of `devices`: replicated state, torch-chunked batch."""

    def __init__(self, devices: tuple[jax.Device, ...], axis_name: str, dim: int):
        self.devices, self.axis_name, self.dim = devices, axis_name, dim
        self.mesh = mesh_of(devices, axis_name)
        self.replicated = NamedSharding(self.mesh, P())
        self._layouts: dict[Any, tuple[int, tuple[int, ...], list[NamedSharding]]] = {}

    def state(self, tree: Any, fresh: bool = False, own: frozenset[int] = frozenset()) -> Any:
        """`tree` replicated on every device; leaves already replicated there are kept as they are.

        fresh: never share a buffer with the caller's arrays (a donating step would delete them), except
        the arrays whose ids are in `own` (what the step itself returned last, passed back: those it
        donates). JAX's device_put reuses the source buffer as the shard on its own device even with
        may_alias=False, so a device array is sent through the host instead (once: the next steps get
        the step's own outputs back).
        """
        def replicate(leaf: Any) -> Any:
            if isinstance(leaf, jax.Array) and leaf.sharding == self.replicated and (not fresh or id(leaf) in own):
                return leaf
            if fresh and isinstance(leaf, jax.Array):
                leaf = np.asarray(leaf)
            return jax.device_put(leaf, self.replicated)
        return jax.tree.map(replicate, tree)

    def batch(self, batch: tuple, who: str) -> tuple[tuple, int, tuple[int, ...]]:
        """(placed batch, batch size, axis per leaf): torch's chunk i on device i, as `P(axis)` when the
        batch splits into n equal chunks, else in n slots of ceil(B/n) rows (see `unslot`).

        One batched transfer; the checks run once per (structure, shapes) and are cached.
        """
        leaves, treedef = jax.tree.flatten(batch)
        key = (treedef, tuple((type(leaf), getattr(leaf, "shape", None)) for leaf in leaves))
        layout = self._layouts.get(key)
        if layout is None:
            layout = self._layouts[key] = self._layout_of(batch, who)
        size, axes, shardings = layout
        if size % len(self.devices) == 0:
            return treedef.unflatten(jax.device_put(leaves, shardings)), size, axes
        # laid out on the host, so no program compiles for it (switch.py's layout, as the eager runner's)
        n = len(self.devices)
        slotted = lay_out_slots([np.asarray(leaf) for leaf in leaves], axes, n, chunk_sizes(size, n)[0], True)
        return treedef.unflatten(jax.device_put(slotted, shardings)), size, axes

    def _layout_of(self, batch: tuple, who: str) -> tuple[int, tuple[int, ...], list[NamedSharding]]:
        """(batch size, axis per leaf, sharding per leaf), raising for a leaf that cannot be split."""
        size, axes = None, []
        for label, leaf in labelled_leaves({"batch": batch}):
            if not isinstance(leaf, (jax.Array, np.ndarray)) or leaf.ndim == 0:
                kind = "a 0-dim array" if getattr(leaf, "ndim", None) == 0 else type(leaf).__name__
                raise UsageTypeError(f"{who}: batch leaf {label} is {kind}; every batch leaf must be an array split "
                                f"along dim={self.dim}: close over other values in loss_fn")
            axis = wrap_dim(self.dim, leaf.shape, label, who)
            if size is not None and leaf.shape[axis] != size:
                raise UsageError(f"{who}: batch leaf {label} has {leaf.shape[axis]} rows along dim={self.dim} but "
                                 f"the first has {size}; every batch leaf is split into the same chunks")
            size = leaf.shape[axis]
            axes.append(axis)
        shardings = [NamedSharding(self.mesh, spec_at(axis, self.axis_name)) for axis in axes]
        return size or 0, tuple(axes), shardings


def unslot(batch: Any, size: int, axes: tuple[int, ...], n: int) -> Any:
    """Inside the step: the batch as the user passed it (B rows along each leaf's axis)."""
    if size % n == 0:
        return batch
    leaves, treedef = jax.tree.flatten(batch)
    return treedef.unflatten([merge_slots(leaf, axis, size) for leaf, axis in zip(leaves, axes)])


class CompiledStep:
    """A jitted data-parallel step that places its own arguments (see the module docstring).

    `step(*state, *batch)`: the first `n_state` arguments are replicated on the mesh, the rest
    are batch arrays split into torch's chunks. `.jitted` is the underlying `jax.jit` function;
    `.compiles()` how many programs its calls have compiled.
    """

    def __init__(self, body: Callable[..., Any], n_state: int, placement: Placement, donate: tuple[int, ...],
                 name: str):
        self.placement, self.n_state, self.name, self.donate = placement, n_state, name, donate
        self._body = body
        self._compiles = 0
        self._returned: list[Any] = []  # the state leaves the last call returned: the only ones donated as given
        self.jitted = jax.jit(self._unslotted, static_argnums=(0, 1), donate_argnums=tuple(d + 2 for d in donate),
                              out_shardings=placement.replicated)

    def _unslotted(self, size: int, axes: tuple[int, ...], *args: Any) -> Any:
        state, batch = args[: self.n_state], args[self.n_state:]
        return self._body(*state, *unslot(batch, size, axes, len(self.placement.devices)))

    def __call__(self, *args: Any) -> Any:
        who = self.name
        if len(args) < self.n_state:
            raise UsageTypeError(f"{who} takes {self.n_state} state argument(s) before the batch, got {len(args)}")
        _refuse_deleted(args[: self.n_state], who)
        own = frozenset(map(id, self._returned))
        state = self.placement.state(args[: self.n_state], fresh=bool(self.donate), own=own)
        batch, size, axes = self.placement.batch(args[self.n_state:], who)
        with count_backend_compiles() as compiled:
            result = self.jitted(size, axes, *state, *batch)
        self._compiles += compiled.count
        if self.donate:
            self._returned = jax.tree.leaves(result[: self.n_state])
        return result

    def compiles(self) -> int:
        """Programs compiled so far by this step's calls (one per distinct shapes, dtypes and batch layout).

        Counted from jax.monitoring's backend-compile events during each call; JAX reports a program it
        loads from its persistent compilation cache the same way, so a load counts too, as does a
        program compiled again after a cache clear.
        """
        return self._compiles


_STATE_NAMES = ("params", "opt_state", "collections")


def _refuse_deleted(state: tuple, who: str) -> None:
    """A donated (deleted) array passed again: JAX 0.10.2 on a CPU mesh can crash on one (SIGSEGV)."""
    if not any(isinstance(leaf, jax.Array) and leaf.is_deleted() for leaf in jax.tree.leaves(state)):
        return  # the common case costs one walk of the leaves; the labels only for the error
    names = _STATE_NAMES if len(state) == 3 else ("variables",)
    label = next(label for label, leaf in labelled_leaves(dict(zip(names, state)))
                 if isinstance(leaf, jax.Array) and leaf.is_deleted())
    raise UsageError(f"{who}: {label} was donated to an earlier call of this step and is deleted; pass each "
                     "step the params, opt_state and collections the previous step returned")


def value_and_grad(loss_fn: Callable[..., Any], placement: Placement, has_aux: bool = False) -> CompiledStep:
    """Jitted `(variables, *batch) -> (loss, grads)` (or `((loss, aux), grads)`): grads of argument 0.

    Integer leaves (a step counter such as torch's num_batches_tracked, kept in a collection) are not
    differentiated: their gradient is JAX's float0 zero (`allow_int`), where they used to fail the step.
    """
    grad_fn = jax.value_and_grad(loss_fn, has_aux=has_aux, allow_int=True)
    return CompiledStep(grad_fn, 1, placement, donate=(), name="DataParallel.value_and_grad step")


def train_step(tx: Any, loss_fn: Callable[..., Any], placement: Placement, has_aux: bool = False,
               return_grads: bool = False) -> CompiledStep:
    """Jitted `(params, opt_state, collections, *batch) -> (params, opt_state, collections, loss)`, and the
    step's gradients of params (what the update used) after the loss with return_grads.

    loss_fn({"params": params, **collections}, *batch) returns the loss, or with has_aux
    (loss, updated_collections), which replace theirs in the returned collections. params,
    opt_state and collections are donated: pass each step the ones the last step returned. The arrays
    you pass that it did not return (the first step's, or params you replicated on the mesh yourself)
    are copied first, so they stay valid; an array an earlier step deleted is refused.
    An optimizer whose update takes extra arguments (optax's GradientTransformationExtraArgs,
    e.g. a chain ending in optax.contrib.reduce_on_plateau) gets the loss as `value=`.
    """
    import optax

    check_transformation(tx)
    # chain() passes extra arguments on to the transformations that take them; the others ignore them
    takes_value = isinstance(tx, optax.GradientTransformationExtraArgs)

    def body(params, opt_state, collections, *batch):
        def loss_of(params):
            return loss_fn({"params": params, **collections}, *batch)

        value, grads = jax.value_and_grad(loss_of, has_aux=has_aux)(params)
        loss, updated = value if has_aux else (value, {})
        extra = {"value": loss} if takes_value else {}
        updates, opt_state = tx.update(grads, opt_state, params, **extra)
        stepped = optax.apply_updates(params, updates), opt_state, {**collections, **updated}, loss
        return (*stepped, grads) if return_grads else stepped

    return CompiledStep(body, 3, placement, donate=(0, 1, 2), name="DataParallel.train_step step")


def check_transformation(tx: Any) -> None:
    if not (callable(getattr(tx, "init", None)) and callable(getattr(tx, "update", None))):
        raise UsageTypeError(f"tx={tx!r} is not an optax GradientTransformation (it needs init and update), "
                        "e.g. optax.sgd(0.1) or optax.adam(1e-3)")


@module_cache(maxsize=64)
def placement_for(devices: tuple[jax.Device, ...], axis_name: str, dim: int) -> Placement:
    """One Placement per (devices, axis name, dim)."""
    return Placement(devices, axis_name, dim)
