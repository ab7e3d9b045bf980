"""Weights between a torch module and a Flax NNX module's state, through the linen rules.

NNX layers name their parameters as linen's do (kernel, bias, scale, embedding; BatchNorm's mean and var are
nnx.BatchStat), so an NNX state is linen variables under another spelling: {'params': <nnx.Param>,
'batch_stats': <nnx.BatchStat>} keyed by the state path, list indices as strings (NNX `blocks[0].q` is
'blocks.0.q', as torch names it). Both functions convert through `torch_to_flax` / `flax_to_torch` with the
same exact rules, so a round trip is bitwise. The mapping is derived by path (comparisons.models registers its
`derive_mapping` here when it loads, as it loads with `comparisons`), or given.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from comparisons.convert._convert import ConversionError, Layer, flax_to_torch, torch_to_flax

_DERIVE: list[Callable[..., tuple[list[Layer], list[str]]]] = []


def use_mapping_deriver(derive: Callable[..., tuple[list[Layer], list[str]]]) -> None:
    """Set how `torch_to_nnx` / `nnx_to_torch` derive a mapping when none is given: derive(torch_module,
    variable shapes, flax_path=hook) -> (layers, torch-only names). comparisons.models sets its `derive_mapping`."""
    _DERIVE[:] = [derive]


# NNX spellings of linen's names: nnx.LSTMCell's forget-gate kernel is `if_` (`if` is a keyword), linen's `if`
_NNX_NAMES = {"if_": "if"}


def nnx_key(path: tuple) -> tuple[str, ...]:
    """An NNX state path as linen variables key it: each part a string (list indices too), NNX spellings of linen's
    names read as linen's ('if_' is 'if')."""
    return tuple(_NNX_NAMES.get(str(part), str(part)) for part in path)


def _collection(variable: Any) -> str | None:
    from flax import nnx

    return "params" if isinstance(variable, nnx.Param) else "batch_stats" if isinstance(variable, nnx.BatchStat) \
        else None


def _flat_state(nnx_module_or_state: Any, who: str) -> list[tuple[tuple, Any]]:
    """(path, Variable) of every nnx.Param and nnx.BatchStat of a module (abstract or not) or a State."""
    from flax import nnx

    if isinstance(nnx_module_or_state, nnx.Module):
        state = nnx.state(nnx_module_or_state)
    elif isinstance(nnx_module_or_state, nnx.State):
        state = nnx_module_or_state
    else:
        raise ConversionError(f"{who}: got a {type(nnx_module_or_state).__name__}, not an NNX Module or State; pass "
                              "the module, or nnx.eval_shape(lambda: MyNet(rngs=nnx.Rngs(0))) to build none")
    return [(path, var) for path, var in nnx.to_flat_state(state) if _collection(var) is not None]


def _linen_layout(flat: list[tuple[tuple, Any]], value: Callable[[Any], Any]) -> dict:
    from flax.traverse_util import unflatten_dict

    return unflatten_dict({(_collection(var), *nnx_key(path)): value(var) for path, var in flat})


def _mapping(who: str, torch_module: Any, shapes: dict, mapping: Sequence[Layer] | None,
             flax_path: Callable[[str], str | None] | None) -> tuple[Sequence[Layer], set[str]]:
    """The mapping given, or derived by path; and the torch names no NNX Variable mirrors (tied aliases)."""
    if mapping is not None:
        return mapping, set()
    if not _DERIVE:
        raise ConversionError(f"{who}: no mapping given and none can be derived (import comparisons.models); "
                              "pass mapping=[Layer(...), ...]")
    layers, one_sided = _DERIVE[0](torch_module, shapes, flax_path=flax_path)
    return layers, set(one_sided)


def torch_to_nnx(torch_module: Any, nnx_module: Any, *, mapping: Sequence[Layer] | None = None,
                 flax_path: Callable[[str], str | None] | None = None) -> Any:
    """`torch_module`'s weights as an `nnx.State` of `nnx_module`'s nnx.Param and nnx.BatchStat Variables.

    Args:
      torch_module: the torch model.
      nnx_module: its NNX twin, or its abstract form `nnx.eval_shape(lambda: MyNet(rngs=nnx.Rngs(0)))` (no
        weights are built); only its structure and shapes are read.
      mapping: `Layer` entries; None derives them by path (torch 'blocks.0.q' is NNX 'blocks.0.q').
      flax_path: hook(torch module name) -> NNX path for modules whose names differ (derived mappings only).
    Returns the State; `nnx.update(model, state)` loads it. Each leaf is checked against the NNX shape; a mismatch
    raises ConversionError naming the path. Costs one copy of the weights.
    """
    import jax.numpy as jnp
    from flax import nnx

    flat = _flat_state(nnx_module, "torch_to_nnx")
    shapes = _linen_layout(flat, lambda var: var.get_value())
    layers, one_sided = _mapping("torch_to_nnx", torch_module, shapes, mapping, flax_path)
    kept = {k: v for k, v in torch_module.state_dict().items() if k not in one_sided}
    variables = torch_to_flax(kept, layers, like=shapes)
    from flax.traverse_util import flatten_dict

    leaves = flatten_dict(variables)
    return nnx.from_flat_state([(path, var.copy(jnp.asarray(leaves[(_collection(var), *nnx_key(path))])))
                                for path, var in flat])


def nnx_to_torch(nnx_module_or_state: Any, torch_module: Any, *, mapping: Sequence[Layer] | None = None,
                 flax_path: Callable[[str], str | None] | None = None) -> dict:
    """An NNX module's (or State's) nnx.Param and nnx.BatchStat values as `torch_module`'s state_dict: fresh CPU
    tensors, checked against its shapes, tied names filled from their canonical tensor, so
    `torch_module.load_state_dict(...)` is strict-safe. Args as `torch_to_nnx`'s."""
    import numpy as np

    flat = _flat_state(nnx_module_or_state, "nnx_to_torch")
    variables = _linen_layout(flat, lambda var: np.asarray(var.get_value()))
    layers, one_sided = _mapping("nnx_to_torch", torch_module, variables, mapping, flax_path)
    like = torch_module.state_dict()
    tensors = flax_to_torch(variables, layers, like={k: v for k, v in like.items() if k not in one_sided})
    canonical = {id(p): name for name, p in torch_module.named_parameters()}
    for name, value in torch_module.state_dict(keep_vars=True).items():
        if name in one_sided:  # a tied alias takes its canonical tensor; a transient buffer its own value
            source = canonical.get(id(value))
            tensors[name] = tensors[source].clone() if source in tensors else like[name].clone()
    return tensors
