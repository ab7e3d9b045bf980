"""Recorders of every mapped layer's calls: forward hooks on torch modules, an interceptor on Flax linen ones, and
`nnx.capture` on Flax NNX ones (models/jax_nnx.py `recording_layers`, keyed by module path and call).

torch: `register_forward_hook(with_kwargs=True)` on each mapped module; replicas made by `dp_torch.replicate`
share the original's hook table (a replica is a shallow copy of its module), so one hook sees every replica,
told apart by `replica_of`. Flax: `flax.linen.intercept_methods` around `apply`, which sees each module's
`__call__` with its arguments: `capture_intermediates` records outputs alone, and a layer's verdict needs its
inputs too. Both keep host copies, in the order the calls complete.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from comparisons.convert import RULES, Layer
from comparisons.errors import UsageError
from comparisons.layers._records import Call
from comparisons.models.jax_nnx import recording_layers
from comparisons.placement import canonical_path
from comparisons.runs import to_numpy


def first_tensor(value: Any, is_tensor: Callable[[Any], bool]) -> Any:
    """The first tensor in `value` (itself, or depth first through tuples, lists and dict values), or None."""
    if is_tensor(value):
        return value
    children = value.values() if isinstance(value, dict) else value if isinstance(value, (tuple, list)) else ()
    for child in children:
        found = first_tensor(child, is_tensor)
        if found is not None:
            return found
    return None


@contextlib.contextmanager
def torch_hooks(module: Any, mapping: Sequence[Layer], replica_of: Callable[[Any], int | None] = lambda m: None,
                ) -> Iterator[list[Call]]:
    """Hooks on every mapped module of `module` for the block; yields the list the calls land in.

    Args:
      replica_of: the module object a hook fired on -> its replica index (None: not a replica).
    Costs a host copy of each layer's first input and output per call; the hooks are removed on exit.
    """
    import torch

    modules = dict(module.named_modules())
    missing = [layer.torch for layer in mapping if layer.torch not in modules]
    if missing:
        raise UsageError(f"layer view: the mapping names torch modules {missing} that the torch model lacks; "
                         f"its modules are {sorted(m for m in modules if m)[:12]}...")
    calls: list[Call] = []

    def host(x):
        return None if x is None else to_numpy(x)

    def hook_for(index):
        def hook(mod, args, kwargs, output):
            is_tensor = torch.is_tensor
            calls.append(Call(index, replica_of(mod), host(first_tensor((args, kwargs), is_tensor)),
                              host(first_tensor(output, is_tensor))))
        return hook
    handles = [modules[layer.torch].register_forward_hook(hook_for(i), with_kwargs=True)
               for i, layer in enumerate(mapping)]
    try:
        yield calls
    finally:
        for handle in handles:
            handle.remove()


def flax_module_path(layer: Layer) -> str:
    """The dotted path of the Flax module whose call stands for `layer` (its rule's `activations.flax_module`)."""
    path = canonical_path(layer.flax)
    if RULES[layer.kind].activations.flax_module == "..":
        path = path.rpartition(".")[0]
    return path


@contextlib.contextmanager
def flax_interceptor(mapping: Sequence[Layer], replica: int | None = None) -> Iterator[list[Call]]:
    """Records every mapped Flax module's `__call__` inside the block (eager `apply` only: a call traced by
    jit or scan is recorded as `traced`, with no values)."""
    import jax

    with _intercepted(mapping, lambda index, arguments, output: _flax_call(index, replica, arguments, output,
                                                                           jax)) as calls:
        yield calls


@contextlib.contextmanager
def _intercepted(mapping: Sequence[Layer], record: Callable[[int, Any, Any], Any]) -> Iterator[list]:
    """Every mapped Flax module's `__call__` in the block, as record(layer index, (args, kwargs), output)."""
    import flax.linen as nn

    targets = {flax_module_path(layer): i for i, layer in enumerate(mapping)}
    calls: list = []

    def interceptor(next_fun, args, kwargs, context):
        output = next_fun(*args, **kwargs)
        scope = getattr(context.module, "scope", None)
        if context.method_name == "__call__" and scope is not None:
            index = targets.get(canonical_path("/".join(map(str, scope.path))))
            if index is not None:
                calls.append(record(index, (args, kwargs), output))
        return output
    def nnx_call(index, arguments, output):  # an NNX twin's calls, recorded by its JAX side (models/jax_nnx.py)
        calls.append(record(index, arguments, output))
    with nn.intercept_methods(interceptor), recording_layers(targets, nnx_call):
        yield calls


def compiled_recorder(flax_module: Any, mapping: Sequence[Layer], mutable: Any) -> Callable[..., list[Call]]:
    """(variables, inputs, replica) -> the calls of one training-mode apply, run as one jitted program on the
    device the arguments are committed to (one compile per device and input shape, instead of one per
    primitive as op-by-op dispatch costs there). The recorded values are returned as the program's outputs,
    so a layer called inside a JAX transform (nn.scan) cannot be returned: that apply runs eagerly instead."""
    import jax
    import jax.numpy as jnp

    def is_array(x):
        return isinstance(x, (jax.Array, np.ndarray))

    def run(variables, x):
        def record(index, arguments, output):
            return jnp.int32(index), first_tensor(arguments, is_array), first_tensor(output, is_array)
        with _intercepted(mapping, record) as calls:
            flax_module.apply(variables, *x, train=True, mutable=mutable)
        return calls
    program = jax.jit(run)

    def calls_of(variables, x, replica):
        try:
            found = jax.device_get(program(variables, tuple(x)))
        except jax.errors.UnexpectedTracerError:
            with flax_interceptor(mapping, replica) as calls:
                flax_module.apply(variables, *x, train=True, mutable=mutable)
            return list(calls)
        return [Call(int(index), replica, None if a is None else np.array(a), None if b is None else np.array(b))
                for index, a, b in found]
    return calls_of


def _flax_call(index: int, replica: int | None, arguments: Any, output: Any, jax: Any) -> Call:
    def is_array(x):
        return isinstance(x, (jax.Array, np.ndarray))
    x, y = first_tensor(arguments, is_array), first_tensor(output, is_array)
    if any(isinstance(v, jax.core.Tracer) for v in (x, y)):
        return Call(index, replica, None, None, traced=True)
    return Call(index, replica, None if x is None else np.array(x), None if y is None else np.array(y))
