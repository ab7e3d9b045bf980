"""parallel_apply: run one jitted apply per replica, each on its own device.

The JAX twin of dp_torch/parallel_apply.py. torch needs one thread per replica; JAX dispatches
asynchronously, so a plain loop starts every replica before any of them finishes. Each call goes
through one module-level `jax.jit`, whose cache keeps one compiled program per (apply_fn, shapes,
non-array arguments, device): a repeated call with the same shapes compiles nothing.
"""
from __future__ import annotations

import functools
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import jax

from dp_jax import nnx
from dp_jax._devices import DeviceLike, committed_device, device_label, is_array_leaf, resolve_devices
from dp_jax._errors import UsageError, UsageTypeError

_DYNAMIC = object()  # stands for an array leaf in the static (hashable) half of the arguments


def parallel_apply(
    apply_fn: Callable[..., Any],
    replicas: Sequence[Any],
    inputs: Sequence[Any] | None = None,
    kwargs_tup: Sequence[dict[str, Any]] | None = None,
    devices: Sequence[DeviceLike] | None = None,
) -> list[Any]:
    """Return [apply_fn(replicas[i], *inputs[i], **kwargs_tup[i]) run on device i for each i].

    Compiles apply_fn once per (shapes, device) and reuses it on later calls; does not sync (outputs
    may still be computing). An inputs entry that is a tuple or list is unpacked, anything else is
    one argument. devices=None takes each replica's device from its committed arrays. Non-array
    arguments are compiled in as constants, so they must be hashable.

    NNX, as torch: `parallel_apply(modules, inputs, kwargs_tup=None, devices=None)` with the modules
    `dp_jax.replicate(model, devices)` returns; each module's changed state is written into it.
    """
    if nnx.is_nnx_sequence(apply_fn):
        if kwargs_tup is not None and devices is not None:
            raise UsageTypeError("parallel_apply(modules, inputs, kwargs_tup, devices): devices given twice")
        return _parallel_apply_modules(list(apply_fn), replicas, inputs, devices if devices is not None
                                          else kwargs_tup)
    _refuse_modules(apply_fn)
    if inputs is None:
        raise UsageTypeError("parallel_apply(apply_fn, replicas, inputs): inputs is missing; pass one per replica")
    n = len(replicas)
    if n == 0:
        raise UsageError("parallel_apply: replicas is empty; pass at least one (see dp_jax.replicate)")
    _check_length("inputs", inputs, n)
    kwargs_tup = ({},) * n if kwargs_tup is None else kwargs_tup
    _check_length("kwargs_tup", kwargs_tup, n)
    if devices is not None:
        _check_length("devices", devices, n)
        devices = resolve_devices(devices)
    _check_hashable(apply_fn)
    outputs = []
    for i, (replica, entry, kwargs) in enumerate(zip(replicas, inputs, kwargs_tup)):
        args = tuple(entry) if isinstance(entry, (list, tuple)) else (entry,)
        call = {f"replicas[{i}]": replica, f"inputs[{i}]": args, f"kwargs_tup[{i}]": kwargs}
        device = _replica_device(i, call, None if devices is None else devices[i])
        static, arrays = _split_static((replica, args, kwargs), i)
        try:
            with jax.default_device(device):  # uncommitted arguments follow the replica's device
                outputs.append(_apply_jitted(apply_fn, static, arrays))
        except Exception as error:
            raise _located(error, i, device) from error
    return outputs


def _parallel_apply_modules(modules: list, inputs: Any, kwargs_tup: Any, devices: Any) -> list:
    """[modules[i](*inputs[i], **kwargs_tup[i]) on device i]; each replica's changed state written into it.

    One compiled program per (structure, shapes, device), as for an apply function.
    """
    splits = [nnx.split_module(m, "parallel_apply") for m in modules]
    replica = splits[0].replica_fn.without_keys()
    for i, split in enumerate(splits[1:], start=1):
        if split.replica_fn.without_keys() != replica:
            raise UsageError(f"parallel_apply: replicas[{i}] is not structured as replicas[0]; pass the modules "
                             "dp_jax.replicate(model, devices) returns")
    all_leaves = [tuple(s.replica_fn.leaves(s.variables, s.keys)) for s in splits]
    results = parallel_apply(nnx.ModuleApply(replica), all_leaves, inputs, kwargs_tup, devices)
    for module, split, (_, changed) in zip(modules, splits, results):
        nnx.write_back(module, split, changed)
    return [output for output, _ in results]


def _refuse_modules(apply_fn: Any) -> None:
    """A single NNX module, or linen Modules, where apply_fn goes: name the form that works."""
    nnx.refuse_nnx(apply_fn, "parallel_apply(apply_fn=...)", "one module is not a list of replicas: pass the list "
                   "dp_jax.replicate(model, devices) returns, as torch's parallel_apply(replicas, inputs)")
    linen = [v for v in (apply_fn if isinstance(apply_fn, (list, tuple)) else [apply_fn]) if nnx.is_linen_module(v)]
    if linen:
        raise UsageTypeError(f"parallel_apply got a linen Module ({type(linen[0]).__name__}) as apply_fn; linen "
                             "modules hold no variables: pass module.apply with replicate(variables, devices), or "
                             "NNX modules from replicate(nnx_model, devices)")


def _check_length(name: str, values: Sequence[Any], n_replicas: int) -> None:
    if len(values) != n_replicas:
        raise UsageError(
            f"parallel_apply: got {n_replicas} replicas but {len(values)} {name}; pass one entry per "
            "replica (scatter gives fewer chunks than devices for small batches: replicate to "
            "devices[:len(chunks)])"
        )


def _check_hashable(apply_fn: Callable[..., Any]) -> None:
    try:
        hash(apply_fn)
    except TypeError:
        raise UsageTypeError(
            f"parallel_apply: apply_fn={apply_fn!r} is not hashable; it keys the compile cache, so pass "
            "a function, a bound method of a hashable object, or a functools.partial"
        ) from None


def _replica_device(i: int, call: dict[str, Any], requested: jax.Device | None) -> jax.Device:
    """The device replica i runs on; refuses a replica or input committed somewhere else."""
    found = committed_device(call)
    if requested is None and found is None:
        raise UsageError(
            f"parallel_apply: cannot tell which device replica {i} belongs to (none of its arrays or "
            "inputs is committed); pass devices=[...] or place them with dp_jax.replicate/scatter"
        )
    if requested is not None and found is not None and found != requested:
        raise UsageError(
            f"parallel_apply: devices[{i}]={device_label(requested)} but replica {i} or its inputs are "
            f"committed to {device_label(found)}; replicate and scatter to the same devices you pass here"
        )
    return requested if requested is not None else found


def _split_static(call: tuple, i: int) -> tuple[tuple, list]:
    """Split (replica, args, kwargs) into a hashable static part and the list of array leaves."""
    with_paths, treedef = jax.tree_util.tree_flatten_with_path(call)
    arrays, statics = [], []
    for path, leaf in with_paths:
        if is_array_leaf(leaf):
            arrays.append(leaf)
            statics.append(_DYNAMIC)
        else:
            _check_static(leaf, path, i)
            statics.append((type(leaf), leaf))  # the type too: 1, 1.0 and True are equal as keys
    return (treedef, tuple(statics)), arrays


def _check_static(leaf: Any, path: tuple, i: int) -> None:
    try:
        hash(leaf)
    except TypeError:
        where = ("replica", "args", "kwargs")[path[0].idx] + jax.tree_util.keystr(path[1:])
        raise UsageTypeError(
            f"parallel_apply: {where} of replica {i} is a {type(leaf).__name__}, which is neither an "
            "array nor hashable; non-array arguments are compiled in as constants, so pass arrays, "
            "hashable values, or register the class as a pytree"
        ) from None


@functools.partial(jax.jit, static_argnums=(0, 1))
def _apply_jitted(apply_fn: Callable[..., Any], static: tuple, arrays: list) -> Any:
    treedef, statics = static
    leaves = iter(arrays)
    replica, args, kwargs = treedef.unflatten([next(leaves) if s is _DYNAMIC else s[1] for s in statics])
    return apply_fn(replica, *args, **kwargs)


def _located(error: Exception, index: int, device: jax.Device) -> Exception:
    """`error` re-made with its replica and device in the message, keeping its type wherever a copy of that
    type shows the message (as torch's ExceptionWrapper does); else a RuntimeError."""
    message = (
        f"Caught {type(error).__name__} in replica {index} on device {device_label(device)}.\n"
        f"Original {''.join(traceback.format_exception(error))}"
    )
    if isinstance(error, KeyError):
        message = _VerbatimMessage(message)  # KeyError's str() would show the repr of the message
    for rebuild in (type(error), functools.partial(_without_constructor, error)):
        try:
            located = rebuild(message)
            if str(located) == message:
                return located
        except Exception:
            continue
    return RuntimeError(message)


def _without_constructor(error: Exception, message: str) -> Exception:
    """An `error` of the same type made without calling its constructor (flax's ScopeParamShapeError
    takes four arguments), with the original's attributes and `message` as its only arg."""
    located = type(error).__new__(type(error))
    located.__dict__.update(vars(error))
    located.args = (message,)
    return located


class _VerbatimMessage(str):
    def __repr__(self) -> str:
        return str(self)
