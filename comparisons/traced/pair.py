"""`pair_from_torch`: a torch model and, as its JAX side, the same model traced by torchax (no Flax twin).

The pair keeps torch's own names on both sides: the JAX variables are {'params': {parameter name: array},
'batch_stats': {buffer name: array}}, so no mapping is written and none converts anything. The JAX side
is built and run in a worker process (jax_side.py), never here.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from comparisons.errors import UsageError, UsageTypeError
from comparisons.models import JaxSide, ModelPair
from comparisons.traced.jax_side import TRACED

LABEL = "JAX side traced by torchax"


@dataclasses.dataclass(frozen=True)
class TracedLayer:
    """One tensor lined up by name on both sides (what `Layer` is for a ported pair, without a conversion)."""

    torch: str
    flax: str
    kind: str = "traced"


def _in_worker(*_: Any) -> Any:
    raise UsageError(f"{LABEL}: the JAX side is built in its worker process; run the pair with "
                     "comparisons.compare(pair, ...) (or `python -m comparisons run --torch ...`)")


@dataclasses.dataclass(frozen=True)
class TracedPair(ModelPair):
    """A ModelPair whose JAX side is the torch module traced by torchax (in a worker process).

    Extra attributes:
      torch_source: what the worker rebuilds the module from: 'module:factory', 'file.py:factory' or a
        picklable module; the weights are sent along, so both sides hold the same ones.
      loss_source: the same for `loss_torch` (the worker traces it into the JAX loss).
      parameter_names / buffer_names: torch's named_parameters() and persistent buffers.
      timeout: seconds the worker may take, start-up and compiles included.
    """

    torch_source: Any = None
    loss_source: Any = None
    parameter_names: tuple[str, ...] = ()
    buffer_names: tuple[str, ...] = ()
    timeout: float = 900.0
    jax_side: JaxSide = dataclasses.field(default=TRACED, compare=False, repr=False)

    def torch_to_flax(self, state_dict: Mapping[str, Any], *, like: Any = None) -> dict:
        """torch's state_dict split into params and batch_stats, by name, as host copies."""
        host = {name: _numpy(value) for name, value in state_dict.items()}
        variables = {"params": {name: host[name] for name in self.parameter_names}}
        if self.buffer_names:
            variables["batch_stats"] = {name: host[name] for name in self.buffer_names}
        return variables

    def flax_to_torch(self, variables: Any, *, like: Any = None) -> dict:
        return {**variables["params"], **variables.get("batch_stats", {})}

    def torch_grads_to_flax(self, grads: Any) -> dict:
        return {name: _numpy(grads[name]) for name in self.parameter_names}

    def grads_to_torch(self, grads: Any) -> dict:
        return dict(grads)

    def is_torch_only(self, name: str) -> bool:
        """Only what the user declares: num_batches_tracked is traced, so it is compared like any buffer."""
        from comparisons.placement import path_matches

        return path_matches(name, self.torch_only)


def _numpy(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):
        value = value.detach().cpu().numpy()
    return np.array(value, copy=True)


def pair_from_torch(module_or_factory: Any, *, make_inputs: Callable, loss_torch: Callable,
                    name: str | None = None, timeout: float = 900.0) -> TracedPair:
    """A pair whose JAX side is `module_or_factory` traced by torchax: for a model with no Flax twin.

    Args:
      module_or_factory: a torch `nn.Module` (picklable: its class importable), a factory () -> module
        defined at a module's top level, or a 'package.module:factory' / 'path/to/file.py:factory' target.
      make_inputs: (batch_size, seed, dtype) -> (inputs tuple, targets), numpy, as `ModelPair.make_inputs`.
      loss_torch: (output, targets) -> scalar tensor, top-level (the worker imports it by name and traces it),
        or a target string naming one.
      name: the report's model name (default: the module's class or the target), labelled "traced by torchax".
      timeout: seconds the JAX worker may take.
    Cost: builds the module once here (torch only). torchax is imported in the worker process alone.
    """
    from comparisons.traced.jax_side import source_of

    if not callable(make_inputs):
        raise UsageTypeError(f"pair_from_torch: make_inputs={make_inputs!r} is not callable; pass "
                             "make_inputs(batch_size, seed, dtype) -> (inputs, targets)")
    torch_source = source_of(module_or_factory, "module_or_factory")
    loss_source = source_of(loss_torch, "loss_torch")
    if isinstance(loss_torch, str):
        from comparisons.traced.jax_side import resolve

        loss_torch = resolve(loss_torch, "loss_torch")
    if not callable(loss_torch):
        raise UsageTypeError(f"pair_from_torch: loss_torch={loss_torch!r} is not callable; pass "
                             "loss_torch(output, targets) -> scalar tensor, or a 'module:function' target")
    make_torch = _factory(module_or_factory)
    probe = ModelPair("probe", make_torch, _in_worker, (), make_inputs, loss_torch, _in_worker).build_torch()
    parameters = tuple(n for n, _ in probe.named_parameters())
    persistent = set(probe.state_dict())  # a tied parameter's second name is in the state_dict, but no buffer
    buffers = tuple(n for n, _ in probe.named_buffers() if n in persistent)
    # Non-persistent buffers are outside torch's state_dict, so outside its snapshots: declared one-sided, listed
    # in the report's notes, and left out of the cross-framework checks (the JAX side keeps them in 'constants').
    constants = tuple(n for n, _ in probe.named_buffers() if n not in persistent)
    # A tied parameter's second name (GPT-2's lm_head.weight is wte.weight): one JAX leaf, as in named_parameters;
    # declared torch-only, as the Hugging Face pairs declare it.
    tied = tuple(n for n in persistent if n not in {*parameters, *buffers})
    title = name or (module_or_factory if isinstance(module_or_factory, str) else type(probe).__name__)
    return TracedPair(
        name=f"{title} ({LABEL})", make_torch=make_torch, make_flax=_in_worker,
        mapping=tuple(TracedLayer(n, n) for n in (*parameters, *buffers)), make_inputs=make_inputs,
        loss_torch=loss_torch, loss_jax=_in_worker, has_batch_stats=bool(buffers),
        description=f"{title}: {LABEL} (no Flax twin)", torch_only=(*constants, *tied),
        flax_only=tuple(f"constants.{n}" for n in constants), torch_source=torch_source, loss_source=loss_source,
        parameter_names=parameters, buffer_names=buffers, timeout=timeout)


def _factory(module_or_factory: Any) -> Callable[[], Any]:
    import copy

    from comparisons.traced.jax_side import resolve

    if isinstance(module_or_factory, str):
        return lambda: resolve(module_or_factory, "module_or_factory")
    if isinstance(module_or_factory, type) or not hasattr(module_or_factory, "state_dict"):
        return module_or_factory
    return lambda: copy.deepcopy(module_or_factory)
