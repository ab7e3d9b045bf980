"""Everything that touches torchax, fenced in one module: the pin, the import, the trace, one op fixed.

Written for torchax 0.0.14.dev20261026 (https://github.com/google/torchax): the stable 0.0.13 fails at
import on torch 2.13 (google/torchax#101, fixed by PR #102, in the nightlies only). Importing torchax
renames torch's PrivateUse1 backend to 'jax' and turns off torch's MHA fast path for the whole process,
so only the worker process (worker.py) imports this module.
"""
from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from comparisons.errors import UsageError

PIN = "torchax==0.0.14.dev20261026"
INSTALL = "pip install 'dp-compare[auto]'"


def import_torchax() -> Any:
    """torchax, with the one op it leaves incomplete fixed in its default environment; or a UsageError
    saying how to install the pinned release. Process-global (see the module docstring)."""
    try:
        import torchax
    except ImportError as error:
        raise UsageError(f"the JAX side traced by torchax needs torchax ({PIN}), which is not importable here "
                         f"({error}); install it with {INSTALL}") from None
    env = torchax.default_env()
    if not getattr(env, "_dp_compare_fixed", False):
        _write_back_batch_norm_statistics(env)
        env._dp_compare_fixed = True
    return torchax


def version() -> str:
    return getattr(sys.modules.get("torchax"), "__version__", "unknown")


def _write_back_batch_norm_statistics(env: Any) -> None:
    """torchax's training batch norm computes the running statistics and drops them (and would keep the biased
    variance): torch updates running_mean and running_var in place with the unbiased one. This override
    writes torch's update into the buffers, so the trace returns them like num_batches_tracked."""
    import torch
    from torchax.ops import jaten

    def batch_norm(*args):  # aten's own positional signature: input, weight, bias, mean, var, training, momentum, eps
        input, weight, bias, running_mean, running_var, training, momentum, eps = args
        jax_args = env.t2j_iso((input, weight, bias, running_mean, running_var))
        out = env.j2t_iso(jaten._aten__native_batch_norm_legit(*jax_args, training, momentum, eps))
        if training and running_mean is not None:
            dims = [0, *range(2, input.ndim)]
            rows = input.numel() // input.shape[1]
            with torch.no_grad():
                mean, var = input.mean(dims), input.var(dims, correction=1 if rows > 1 else 0)
                running_mean.copy_((1 - momentum) * running_mean + momentum * mean)
                running_var.copy_((1 - momentum) * running_var + momentum * var)
        return out

    env.override_op_definition(torch.ops.aten._native_batch_norm_legit.default, batch_norm)
    env.override_op_definition(torch.ops.aten.native_batch_norm.default, batch_norm)


_DATA_DEPENDENT = ("ConcretizationTypeError", "TracerBoolConversionError", "TracerIntegerConversionError",
                   "NonConcreteBooleanIndexError", "TracerArrayConversionError", "UnexpectedTracerError")
_READS = {"local_scalar_dense": "Tensor.item()", "nonzero": "torch.nonzero", "bernoulli": "Dropout's random mask"}


def data_dependent_op(error: BaseException) -> str | None:
    """'aten.OP (what calls it) at the user's file:line' when `error` is JAX refusing a value the trace cannot
    know (a Python branch on .item(), torch.nonzero's data-dependent shape, a random op's leaked key); else None."""
    import re
    import traceback

    from comparisons.errors import frames, user_frames

    if type(error).__name__ not in _DATA_DEPENDENT:
        return None
    text = "".join(traceback.format_exception(error))
    ops = re.findall(r"\b_aten_(\w+)", text)
    op = f"aten.{ops[-1]}" + (f" ({_READS[ops[-1]]})" if ops[-1] in _READS else "") if ops else type(error).__name__
    user = user_frames(frames(text))
    where = f" at {user[-1][0]}, line {user[-1][1]}, in {user[-1][2]}" if user else ""
    if type(error).__name__ == "UnexpectedTracerError":  # a random op's key drawn inside the trace leaks out
        return (f"{op}{where}: a random op (active dropout) draws its key inside the trace, and its masks could "
                f"not match torch's anyway ({type(error).__name__}); set the dropout probability to 0")
    return (f"{op}{where}: its result depends on the data, which a JAX trace does not have "
            f"({type(error).__name__})")


def untraceable_op(error: BaseException) -> str | None:
    """The aten op named by torchax's 'no lowering' error, or None when `error` is another failure."""
    torchax = sys.modules.get("torchax")
    not_found = getattr(getattr(torchax, "tensor", None), "OperatorNotFound", None)
    if not_found is not None and isinstance(error, not_found):
        return str(error)
    return None


class TracedApply:
    """The torch module as a JAX function, called as the harness calls a Flax model:
    `apply(variables, *inputs, train=, mutable=)` with variables {'params': {name: array}, 'batch_stats':
    {buffer name: array}} under torch's own names; with `mutable`, also returns the buffers as the forward
    left them (in-place updates come back as new values). Hashes by identity, so compiled programs are reused
    while it lives. Cost: one torch forward traced per call outside jit; inside jit, once per shape."""

    def __init__(self, module: Any, buffer_names: tuple[str, ...]) -> None:
        from torchax.interop import JittableModule

        self.module = module
        self.env = import_torchax().default_env()
        self.jittable = JittableModule(module, dedup_parameters=True)
        self.buffer_names = buffer_names

    def variables(self) -> dict:
        """The module's weights as this function's variables (a JAX copy, on JAX's default device): params,
        the state_dict's buffers in 'batch_stats', and non-persistent buffers (a causal mask) in 'constants',
        so every replica holds a copy of each, as torch's replicas do."""
        buffers = self.jittable.buffers
        variables = {"params": self.env.t2j_copy(dict(self.jittable.params)),
                     "batch_stats": self.env.t2j_copy({k: buffers[k] for k in self.buffer_names}),
                     "constants": self.env.t2j_copy({k: v for k, v in buffers.items() if k not in self.buffer_names})}
        return {name: tree for name, tree in variables.items() if tree or name == "params"}

    def apply(self, variables: Mapping, *inputs: Any, train: bool = False, mutable: Any = False,
              rngs: Any = None) -> Any:
        self.module.train(train)
        buffers = {**variables.get("constants", {}), **variables.get("batch_stats", {})}
        params, buffers, args = self.env.j2t_iso((dict(variables["params"]), buffers, inputs))
        with self.env:
            out = self.jittable.functional_call("forward", params, buffers, *args)
        out, buffers = self.env.t2j_iso((out, buffers))
        out = _plain(out)
        if not mutable:
            return out
        return out, {"batch_stats": {k: buffers[k] for k in self.buffer_names}}

    __call__ = apply

    def init(self, rngs: Any, *inputs: Any) -> dict:
        return self.variables()

    def __repr__(self) -> str:
        return f"TracedApply({type(self.module).__name__}, traced by torchax {version()})"


def _plain(value: Any) -> Any:
    """A dict subclass (transformers' ModelOutput) as a dict and a tuple subclass as a tuple, so JAX's tree
    functions, which know only the plain containers, see through them."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, (tuple, list)):
        return tuple(_plain(v) for v in value)
    return value


def traced_loss(loss_torch: Any) -> Any:
    """`loss_torch` as a JAX function of JAX arrays (torchax's jax_view): the same loss, traced."""
    from torchax.interop import jax_view

    import_torchax()
    return jax_view(loss_torch)
