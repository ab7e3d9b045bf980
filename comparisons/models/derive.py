"""Pairs from objects a user already has: a torch module, a Flax model, maybe converted variables.

The mapping is derived by path: each torch module that owns parameters or persistent buffers is a
`Layer` whose kind comes from its class (`convert.kind_of`, extended by `convert.register_rule`)
and whose Flax path is its torch name with '/' for '.', unless a `flax_path` hook says otherwise.
Tied parameters (GPT-2's lm_head.weight is wte.weight) and non-persistent buffers (GPT-2's causal
mask) have no Flax counterpart: they are declared torch-only, and the report lists them.
"""
from __future__ import annotations

import copy
import difflib
from collections.abc import Callable, Mapping, Sequence
from fnmatch import fnmatch
from typing import Any

from comparisons.errors import UsageTypeError

from ..convert import ConversionError, Layer, kind_of, use_mapping_deriver
from .declared import padding_rows
from .jax_flax_apply import FLAX_APPLY, FlaxApply
from .jax_linen import LINEN
from .jax_nnx import NNX, is_nnx_module, nnx_kind, short_description
from .pair import ModelPair, omitted_loss, refuse_an_omitted_loss

FlaxPathHook = Callable[[str], "str | None"]


def derive_mapping(torch_module: Any, flax_variables: Mapping, *, flax_path: FlaxPathHook | None = None,
                   torch_only: Sequence[str] = ()) -> tuple[list[Layer], list[str]]:
    """Mapping entries by path, and the torch names that have no Flax counterpart.

    Args:
      torch_module: the torch model.
      flax_variables: its Flax twin's variables, or their shapes (`jax.eval_shape` of init).
      flax_path: hook(torch module name) -> Flax path ('a/b') for the odd ones; None keeps the
        default, the torch name with '/' for '.'.
      torch_only: glob patterns of torch names declared torch-only; a module owning only those
        gets no Layer.
    Returns:
      (layers, torch_only): torch_only lists tied parameters (the same tensor under a second
      name) and non-persistent buffers, which no Flax variable mirrors.
    Raises ConversionError naming the module, its class and the fix when a module has no rule or
    its Flax path is not in the variables.
    """
    from flax.traverse_util import flatten_dict

    flax_modules = _flax_module_paths(flatten_dict(dict(flax_variables)))
    canonical = set(dict(torch_module.named_parameters())) | set(torch_module.state_dict(keep_vars=True))
    distinct = set(dict(torch_module.named_parameters()))
    layers, one_sided, seen, absorbed = [], [], set(), set()
    for prefix, sub in torch_module.named_modules():
        if prefix in absorbed:  # its tensors are its parent's rule's (nn.MultiheadAttention's out_proj)
            continue
        if type(sub).__name__ == "ParametrizationList":
            seen.update(f"{prefix}.{k}" for k in sub._parameters)
            continue  # torch's parametrization holds its parent's weight; the parent's rule converts it
        dotted = f"{prefix}." if prefix else ""
        params = [dotted + k for k, v in sub._parameters.items() if v is not None]
        buffers = [dotted + k for k, v in sub._buffers.items() if v is not None]
        tied = [n for n in params if n not in distinct]
        transient = [n for n in buffers if n not in canonical]
        one_sided += tied + transient
        own = [n for n in params + buffers if n not in tied and n not in transient
               and not n.endswith("num_batches_tracked") and not any(fnmatch(n, p) for p in torch_only)]
        own += _nested(prefix, sub, canonical, absorbed, seen)
        if own:
            layers.append(_layer(prefix, sub, own, flax_path, flax_modules, weight_tied=f"{dotted}weight" in tied))
        seen.update(params + buffers)
    # named_modules() visits a module shared under two names once (BART's encoder.embed_tokens is
    # model.shared): its second name is in the state dict only, a tied alias like lm_head.weight
    aliases = [k for k in torch_module.state_dict(keep_vars=True) if k not in seen]
    return layers, one_sided + aliases


def _nested(prefix: str, module: Any, canonical: set, absorbed: set, seen: set) -> list[str]:
    """The tensors of `module`'s submodules that its own rule converts ('out_proj.weight' of an
    nn.MultiheadAttention, whose Flax twin holds them as `out`): their names, their submodules marked absorbed."""
    from comparisons.convert import RULES

    kind = kind_of(module)
    keys = [key for key in (RULES[kind].torch_keys if kind in RULES else ()) if "." in key]
    dotted = f"{prefix}." if prefix else ""
    absorbed.update(dotted + key.rpartition(".")[0] for key in keys)
    names = [dotted + key for key in keys if dotted + key in canonical]
    seen.update(names)
    return names


use_mapping_deriver(derive_mapping)  # convert.torch_to_nnx / nnx_to_torch derive through it


def _layer(prefix: str, module: Any, names: list[str], hook: FlaxPathHook | None, flax_modules: set,
           weight_tied: bool = False) -> Layer:
    kind = kind_of(module)
    if weight_tied and kind in ("linear", "conv"):
        kind = "tied_bias"  # its weight converts where it is canonical; the layer owns only the bias
    cls = f"{type(module).__module__}.{type(module).__qualname__}"
    if kind is None:
        raise ConversionError(
            f"derive_mapping: torch module {prefix or '(root)'!r} ({cls}) owns {names} but no conversion rule "
            f"covers its class; register one with comparisons.convert.register_rule(kind, Rule(...), "
            f"torch_types=[{type(module).__name__}]), or write this pair's mapping by hand")
    path = hook(prefix) if hook is not None else None
    path = (_list_path(prefix, flax_modules) or prefix.replace(".", "/")) if path is None else path
    if tuple(p for p in path.split("/") if p) not in flax_modules:
        close = difflib.get_close_matches(path, sorted("/".join(m) for m in flax_modules), n=3, cutoff=0.4)
        raise ConversionError(
            f"derive_mapping: torch module {prefix!r} ({kind}) maps to Flax path {path!r}, which the Flax "
            f"variables lack (close: {close}); pass flax_path=hook where hook({prefix!r}) returns its path")
    if kind == "lstm":
        kind, path = _lstm_cell(path, flax_modules)
    heads = getattr(module, "num_heads", None) if kind == "mha" else None
    return Layer(kind, prefix, path, num_heads=heads)


def _lstm_cell(path: str, flax_modules: set) -> tuple[str, str]:
    """(kind, Flax path) of a torch nn.LSTM whose twin sits at `path`: the cell's weights are under `path/cell`
    when the twin is an RNN (nnx.RNN, nn.RNN), and an NNX OptimizedLSTMCell (its `dense_i`, `dense_h`) fuses the
    gates as torch does ("lstm_fused"), where per-gate cells convert as "lstm"."""
    parts = tuple(p for p in path.split("/") if p)
    if parts + ("cell",) in flax_modules and parts + ("ii",) not in flax_modules:
        parts += ("cell",)
    return ("lstm_fused" if parts + ("dense_i",) in flax_modules else "lstm"), "/".join(parts)


def _list_path(prefix: str, flax_modules: set) -> str | None:
    """The Flax path of a torch name, list entries spelled as Flax spells them, or None if none is there.

    torch's `nn.ModuleList`/`nn.Sequential` entry 'layers.0' is 'layers/0' in a Flax module named so by hand,
    'layers_0' for a linen list attribute, or 'layers/layers_0' inside a submodule named 'layers'; each
    segment takes the first spelling the Flax variables hold, so no `flax_path` hook is needed.
    """
    found = _spell(tuple(s for s in prefix.split(".") if s), (), flax_modules)
    return None if found is None else "/".join(found)


def _spell(rest: tuple[str, ...], found: tuple[str, ...], flax_modules: set) -> tuple[str, ...] | None:
    if not rest:
        return found
    segment, following = rest[0], rest[1] if len(rest) > 1 else ""
    spellings = [(found + (segment,), rest[1:])]
    if following.isdigit():
        merged = f"{segment}_{following}"
        spellings += [(found + (merged,), rest[2:]), (found + (segment, merged), rest[2:])]
    for spelled, left in spellings:
        if spelled in flax_modules and (whole := _spell(left, spelled, flax_modules)) is not None:
            return whole
    return None


def _flax_module_paths(flat: Mapping[tuple, Any]) -> set[tuple[str, ...]]:
    """Every module path holding a leaf, in any collection: ('a', 'b') for params/a/b/kernel."""
    paths = set()
    for key in flat:
        module = key[1:-1]
        paths.update(module[:i] for i in range(len(module) + 1))
    return paths


def pair_from_modules(name: str, torch_module: Any, flax_model: Any, *,
                      make_inputs: Callable[[int, int, Any], tuple], loss_torch: Callable = omitted_loss,
                      loss_jax: Callable = omitted_loss,
                      variables: Any = None, to_flax_inputs: Callable[[tuple], tuple] | None = None,
                      flax_path: FlaxPathHook | None = None, torch_only: tuple[str, ...] = (),
                      flax_only: tuple[str, ...] = (), known_differences: tuple[str, ...] = (),
                      description: str = "") -> ModelPair:
    """A ModelPair from a torch module and a Flax model you already have; the mapping is derived.

    Args:
      name: the pair's name (register it with `comparisons.models.register` to use it by name).
      torch_module: the torch model; the pair deep-copies it for each comparison.
      flax_model: an `nnx.Module` instance (its nnx.Param and nnx.BatchStat state are its variables, keyed by
        state path: torch `blocks.0.fc` is NNX `blocks[0].fc`), a linen Module taking `train=`, or a
        `FlaxApply` (e.g. `comparisons.hf.flax_apply`).
      make_inputs / loss_torch / loss_jax / to_flax_inputs: as in `ModelPair` (both losses, or a one-line refusal).
      variables: Flax variables converted by another tool (transformers' `from_pt`): used as they
        are, and checked against this pair's own conversion of `torch_module` (bitwise). None:
        convert `torch_module`'s weights with the derived mapping.
      flax_path: hook(torch module name) -> Flax path for modules whose names differ.
      torch_only / flax_only / known_differences: declarations added to the derived ones (see ModelPair).
      description: for `comparisons list`; default "torch <torch class> -> Flax <Flax class>".
    Costs one trace of the Flax init (`jax.eval_shape`, no compile) when `variables` is None.
    """
    refuse_an_omitted_loss(f"pair_from_modules {name!r}", loss_torch, loss_jax)
    _check_sides(torch_module, flax_model)
    api = "Flax NNX" if is_nnx_module(flax_model) else "Flax"
    description = description or (f"torch {type(torch_module).__name__} -> "
                                   f"{api} {type(getattr(flax_model, 'module', flax_model)).__name__}")
    pair = ModelPair(name=name, make_torch=lambda: copy.deepcopy(torch_module), make_flax=lambda: flax_model,
                     mapping=(), make_inputs=make_inputs, loss_torch=loss_torch, loss_jax=loss_jax,
                     **({"to_flax_inputs": to_flax_inputs} if to_flax_inputs is not None else {}),
                     description=description)
    declared = {"torch_only": torch_only, "flax_only": flax_only, "known_differences": known_differences}
    for label, value in declared.items():
        if isinstance(value, str):
            raise UsageTypeError(f"pair_from_modules: {label}={value!r} is a string; pass a tuple, e.g. ({value!r},)")
    side = NNX if is_nnx_module(flax_model) else FLAX_APPLY if isinstance(flax_model, FlaxApply) else LINEN
    shapes = pair.flax_shapes(side.make(pair)) if variables is None else _wrapped(variables)
    layers, derived_only = derive_mapping(torch_module, shapes, flax_path=flax_path, torch_only=torch_only)
    tied = tied_parameters(torch_module)
    aliases = {alias for alias, _ in tied}
    return ModelPair(
        name=name, make_torch=pair.make_torch, make_flax=pair.make_flax, mapping=tuple(layers),
        make_inputs=make_inputs, loss_torch=loss_torch, loss_jax=loss_jax, to_flax_inputs=pair.to_flax_inputs,
        has_batch_stats="batch_stats" in shapes, description=description,
        torch_only=tuple(dict.fromkeys([*(n for n in derived_only if n not in aliases), *torch_only])),
        flax_only=tuple(flax_only), variables=variables, known_differences=tuple(known_differences), tied=tied,
        padding_rows=padding_rows(torch_module, layers) if "padding_row_gradient" in known_differences else (),
        jax_side=side)


def _check_sides(torch_module: Any, flax_model: Any) -> None:
    """Refuse arguments in the wrong place or of the wrong kind, in one line naming what was given."""
    import torch

    if not isinstance(torch_module, torch.nn.Module):
        raise UsageTypeError(f"pair_from_modules: torch_module is {short_description(torch_module)}, not a "
                             "torch.nn.Module; pass the torch model first and the Flax twin second")
    if nnx_kind(flax_model) is not None:
        raise UsageTypeError(f"pair_from_modules: flax_model is {nnx_kind(flax_model)}")
    if not (is_nnx_module(flax_model) or callable(getattr(flax_model, "apply", None))):
        raise UsageTypeError(f"pair_from_modules: flax_model is {short_description(flax_model)}, not a Flax model; "
                             "pass an nnx.Module instance, a linen Module or a FlaxApply")


def tied_parameters(torch_module: Any) -> tuple[tuple[str, str], ...]:
    """(alias, canonical) for each torch parameter name that is a second name of another's tensor.

    GPT-2's lm_head.weight is transformer.wte.weight; BART's encoder.embed_tokens.weight is
    model.shared.weight. The canonical name is the one `named_parameters()` keeps (the first); the
    tensor converts once, there, and its gradient is torch's sum over every use.
    """
    canonical = {id(p): n for n, p in torch_module.named_parameters()}
    return tuple((name, canonical[id(value)]) for name, value in torch_module.state_dict(keep_vars=True).items()
                 if id(value) in canonical and canonical[id(value)] != name)


def _wrapped(variables: Any) -> dict:
    tree = dict(variables)
    return tree if "params" in tree else {"params": tree}

