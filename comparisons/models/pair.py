"""`ModelPair`: a torch model and a Flax model that compute the same function, and a registry."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from comparisons.errors import UsageError, UsageTypeError

from ..convert import Layer
from ..placement import path_matches
from .jax_linen import LINEN
from .jax_nnx import short_description
from .jax_side import Built, JaxSide, build


def _same_layout(arrays: tuple) -> tuple:
    return arrays


def omitted_loss(output: Any, targets: Any) -> Any:
    """The default of a loss left out of `ModelPair` or `pair_from_modules`: never called, refused by name first
    (`refuse_an_omitted_loss`), so a pair never trains one side on a loss the other side does not compute."""
    raise AssertionError("omitted_loss is a marker; refuse_an_omitted_loss refuses it before any run")


def refuse_an_omitted_loss(where: str, loss_torch: Any, loss_jax: Any) -> None:
    """Refuse a pair given one loss without its twin, or neither, in one line naming both arguments and the fix.

    `where` names the call ("pair_from_modules 'gpt2'"). Python's own "missing 1 required keyword-only argument"
    named one argument and no fix; one loss paired with another derived loss fails an honest pair as `port`."""
    omitted = [name for name, loss in (("loss_torch", loss_torch), ("loss_jax", loss_jax)) if loss is omitted_loss]
    if len(omitted) == 2:
        raise UsageTypeError(f"{where}: no loss given; {_BOTH_LOSSES}")
    if omitted:
        missing, given = omitted[0], {"loss_torch": "loss_jax", "loss_jax": "loss_torch"}[omitted[0]]
        framework = "JAX" if missing == "loss_jax" else "torch"
        raise UsageTypeError(f"{where}: {given}= without {missing}=; pass {missing}= too, the same loss in "
                             f"{framework}, (output, targets) -> scalar (one alone would train one side on "
                             "another loss)")


_BOTH_LOSSES = ("pass loss_torch= and loss_jax=, the same loss in each framework, (output, targets) -> scalar "
                "(one alone would train one side on another loss)")
_FUNCTIONS = {"make_torch": "pass a function returning the torch model: make_torch=lambda: MyNet()",
              "make_flax": "pass a function returning the Flax model: make_flax=lambda: MyFlaxNet()",
              "make_inputs": "pass (batch_size, seed, dtype) -> ((x,), y)",
              "loss_torch": _BOTH_LOSSES, "loss_jax": _BOTH_LOSSES}


@dataclass(frozen=True)
class ModelPair:
    """A torch module and a Flax module (NNX or linen), plus what is needed to compare them.

    Conventions (linen): the Flax module's `__call__(*inputs, train=False)`; with `has_batch_stats`, a
    training call needs `mutable=['batch_stats']`. Both models take the batch on `batch_axis` and
    return outputs of the same layout, so outputs compare directly.

    Attributes:
      name: registry key.
      make_torch: () -> torch.nn.Module in float32 with torch's own init (seed torch first).
      make_flax: () -> a flax.nnx.Module instance or a flax.linen.Module (dtype follows the variables and inputs);
        an NNX class, GraphDef, State or an nnx.bridge wrapper is refused in one line naming it.
      mapping: `Layer` entries converting the torch state_dict to Flax variables and back.
      make_inputs: (batch_size, seed, dtype) -> (inputs, targets), numpy, in the torch layout;
        `dtype` is the float dtype (integer inputs such as token ids are int32).
      loss_torch / loss_jax: (output, targets) -> scalar; the same loss in each framework. Both are required:
        one alone, or neither, is refused in one line naming both.
      to_flax_inputs: torch-layout inputs -> Flax-layout inputs (e.g. NCHW -> NHWC).
      torch_only / flax_only: glob patterns (fnmatch) of names that exist on one side only and are
        declared so: torch parameter/buffer names ('*.attn.masked_bias', tied 'lm_head.weight')
        or output paths ('past_key_values*'); Flax variable paths ('params.cache.*') or output
        paths. Paths are dotted as everywhere in a report; 'params/cache/*' and "['logits'][0]"
        are read as 'params.cache.*' and 'logits.0'. They are left out of conversion and
        cross-framework checks, and listed in the report.
      variables: Flax variables converted by another tool (e.g. transformers' `from_pt`), used as
        they are; the harness only checks them against this pair's own conversion (bitwise).
      known_differences: names from `KNOWN_DIFFERENCES` that are not data parallelism; the report
        names and measures them instead of failing on them.
      tied: (alias, canonical) torch parameter names of one tensor (`models.tied_parameters`): the
        alias is neither converted nor compared (its tensor is, under the canonical name) and the
        report lists both names.
      padding_rows: (Flax parameter path, row) of each embedding table whose row torch's
        `padding_idx` keeps out of the gradient ('model.decoder.embed_tokens.embedding', 1); read with
        the known difference 'padding_row_gradient'.
      frozen: the Flax parameter paths of the parameters torch freezes (requires_grad=False), read with the
        known difference 'frozen_in_torch': the JAX side's optimizer leaves them unchanged, as torch.optim
        does, and their Flax gradient is reported one-sided. Filled from the built module (`build_declared`).
      jax_side: what kind of JAX side the pair has (`JaxSide`, models/jax_side.py): how it is made,
        converted and run; a linen Module by default (`pair_from_modules` names a FlaxApply's).
    """
    name: str
    make_torch: Callable[[], Any]
    make_flax: Callable[[], Any]
    mapping: Sequence[Layer]
    make_inputs: Callable[[int, int, Any], tuple[tuple[np.ndarray, ...], np.ndarray]]
    loss_torch: Callable[[Any, Any], Any] = omitted_loss
    loss_jax: Callable[[Any, Any], Any] = omitted_loss
    to_flax_inputs: Callable[[tuple], tuple] = _same_layout
    batch_axis: int = 0
    has_batch_stats: bool = False
    description: str = field(default="", compare=False)
    torch_only: tuple[str, ...] = ()
    flax_only: tuple[str, ...] = ()
    variables: Any = field(default=None, compare=False, repr=False)
    known_differences: tuple[str, ...] = ()
    padding_rows: tuple[tuple[str, int], ...] = ()
    tied: tuple[tuple[str, str], ...] = ()
    frozen: tuple[str, ...] = ()
    jax_side: JaxSide = field(default=LINEN, compare=False, repr=False)

    def __post_init__(self) -> None:
        refuse_an_omitted_loss(f"ModelPair {self.name!r}", self.loss_torch, self.loss_jax)
        for name, fix in _FUNCTIONS.items():
            if not callable(getattr(self, name)):
                raise UsageTypeError(f"ModelPair {self.name!r}: {name}={short_description(getattr(self, name))} is "
                                     f"not callable; {fix}")
        unknown = [d for d in self.known_differences if d not in KNOWN_DIFFERENCES]
        if unknown:
            raise UsageError(f"ModelPair {self.name!r}: known_differences {unknown} are not known; "
                             f"use names from {sorted(KNOWN_DIFFERENCES)}")
        for name in ("torch_only", "flax_only", "known_differences"):
            if isinstance(getattr(self, name), str):
                raise UsageTypeError(f"ModelPair {self.name!r}: {name}={getattr(self, name)!r} is a string; "
                                f"pass a tuple of patterns, e.g. ({getattr(self, name)!r},)")

    def build(self, seed: int = 0, dtype: Any = np.float32) -> Built:
        """Return (torch_module, flax_module, flax_variables) holding the same weights (a `Built`).

        The torch module is initialised under `torch.manual_seed(seed)` (the global torch RNG is
        left untouched) and cast to `dtype`; the variables are its converted state (numpy copies),
        checked against the Flax module's own init shapes (traced, not compiled), made and converted
        by the pair's `jax_side`. Apply float64 variables under `jax.enable_x64(True)`: without it JAX
        silently computes in float32.
        """
        return build(self.jax_side, self, seed, dtype)

    def build_declared(self, seed: int = 0, dtype: Any = np.float32) -> tuple[ModelPair, Built]:
        """`build`, checked for what the training runs would trip on (`models.checks.check_training`: inputs,
        losses, train=, dropout, bfloat16), and this pair with what its declared known differences read from the
        built torch module when the pair does not name it (a ModelPair written by hand): the rows its
        nn.Embedding(padding_idx) keeps out of the gradient ('padding_row_gradient'), the parameters it freezes
        ('frozen_in_torch'). Every run builds
        through here (compare() and each multi-process worker), so the JAX side masks what torch freezes alike.
        Costs what `build` costs, one torch forward and one trace of the JAX loss on a batch of 2."""
        from .checks import check_training

        built = self.build(seed, dtype)
        check_training(self, built, dtype)
        return self.declared(built.torch), built

    def declared(self, torch_module: Any) -> ModelPair:
        """This pair with `padding_rows` and `frozen` filled from `torch_module` where a declared known difference
        reads them and the pair names none (`build_declared`); itself otherwise (or with no torch module)."""
        import dataclasses

        from .declared import frozen_leaves, padding_rows

        known = set(self.known_differences)
        if torch_module is None or not known & {"padding_row_gradient", "frozen_in_torch"}:
            return self
        rows = self.padding_rows or (padding_rows(torch_module, self.mapping) if "padding_row_gradient" in known
                                     else ())
        frozen = self.frozen or (frozen_leaves(torch_module, self.mapping) if "frozen_in_torch" in known else ())
        return dataclasses.replace(self, padding_rows=rows, frozen=frozen)

    def build_torch(self, seed: int = 0, dtype: Any = np.float32) -> Any:
        """The torch module alone: made under `torch.manual_seed(seed)` (the global torch RNG is left untouched)
        and cast to `dtype`."""
        import torch

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            torch_module = self.make_torch()
            self.check_made("make_torch", torch_module, isinstance(torch_module, torch.nn.Module),
                             "torch.nn.Module; return the torch model, e.g. make_torch=lambda: MyNet()")
            if not any(p.requires_grad for p in torch_module.parameters()):  # the optimizers would refuse it
                raise UsageError(f"ModelPair {self.name!r}: make_torch() returned {type(torch_module).__name__}, "
                                 "which has no trainable parameter, so there is no training to compare; pass a "
                                 "model with at least one parameter that requires grad")
            return torch_module.to(torch.float64 if np.dtype(dtype) == np.float64 else torch.float32)

    def check_made(self, function: str, made: Any, ok: bool, expected: str) -> None:
        """Refuse what a user's `function` returned, unless `ok`: naming the pair, the value and `expected`."""
        if not ok:
            raise UsageTypeError(f"ModelPair {self.name!r}: {function}() returned {short_description(made)}, "
                                 f"not a {expected}")

    def flax_shapes(self, flax_module: Any) -> dict:
        """Shapes of the Flax module's variables, from `jax.eval_shape` of its init (no compile)."""
        import jax

        from .checks import checked_inputs

        inputs, _ = checked_inputs(self, 2, 0, np.float32)
        flax_inputs = self.to_flax_inputs(inputs)
        return jax.eval_shape(lambda: flax_module.init(jax.random.key(0), *flax_inputs))

    def torch_to_flax(self, state_dict: Any, *, like: Any = None) -> dict:
        """`convert.torch_to_flax` with this pair's mapping (declared torch-only names left out)."""
        from ..convert import torch_to_flax
        kept = {k: v for k, v in state_dict.items() if not self.is_torch_only(k)}
        return torch_to_flax(kept, self.mapping, like=like)

    def flax_to_torch(self, variables: Any, *, like: Any = None) -> dict:
        """`convert.flax_to_torch` with this pair's mapping (declared Flax-only leaves left out)."""
        from flax.traverse_util import flatten_dict, unflatten_dict

        from ..convert import flax_to_torch
        kept = {k: v for k, v in flatten_dict(dict(variables)).items() if not self.is_flax_only(".".join(k))}
        like = None if like is None else {k: v for k, v in like.items() if not self.is_torch_only(k)}
        return flax_to_torch(unflatten_dict(kept), self.mapping, like=like)

    def torch_grads_to_flax(self, grads: Any) -> dict:
        """torch {parameter name: grad} -> Flax params-shaped gradients (torch-only names left out)."""
        from ..convert import torch_grads_to_flax
        return torch_grads_to_flax({k: v for k, v in grads.items() if not self.is_torch_only(k)}, self.mapping)

    def grads_to_torch(self, grads: Any) -> dict:
        """Flax params-shaped gradients -> torch {parameter name: grad} (`convert.flax_grads_to_torch`)."""
        from ..convert import flax_grads_to_torch
        return flax_grads_to_torch(grads, self.mapping)

    def is_torch_only(self, name: str) -> bool:
        """Whether a torch name or output path is declared torch-only (or is num_batches_tracked)."""
        return (name.endswith("num_batches_tracked") or any(name == alias for alias, _ in self.tied)
                or path_matches(name, self.torch_only))

    def is_flax_only(self, path: str) -> bool:
        """Whether a Flax variable path ('params.a.b') or output path is declared Flax-only."""
        return path_matches(path, self.flax_only)


# Differences between the frameworks that are not data parallelism; a pair opts in by name, and
# the report measures them (comparisons/judge/_declared.py) instead of failing on them.
KNOWN_DIFFERENCES: dict[str, str] = {
    "flax_batchnorm_biased_var": (
        "flax.linen.BatchNorm keeps the biased batch variance in its running average, PyTorch the "
        "unbiased one (x n/(n-1)); both normalise with the biased variance"),
    "float32_islands": (
        "one framework computes part of the model in float32 whatever the model's dtype (rotary or sinusoidal "
        "position tables, ALiBi slopes, attention scores cast up): its float64 run keeps float32 rounding there, so "
        "float64 tells port from rounding only to float32's bound"),
    "torch_buffer_flax_parameter": (
        "a tensor torch keeps as a buffer (mbart's final_logits_bias) is a parameter in Flax: its values are "
        "compared, its Flax gradient has no torch twin and is reported one-sided"),
    "frozen_in_torch": (
        "a parameter torch freezes (requires_grad=False: whisper's embed_positions) has a gradient in Flax: torch "
        "gives it none, so its Flax gradient is reported one-sided, and the JAX side's optimizer leaves it "
        "unchanged, as torch.optim does, so every step's parameters still compare"),
    "padding_row_gradient": (
        "torch's nn.Embedding(padding_idx=p) leaves the lookups of token p out of row p's gradient; a Flax nn.Embed "
        "does not: when the inputs hold p, row p's gradient (and its row after a step) is measured, not compared; "
        "without p in the inputs it is judged like every row. Past one step the row's values feed the forward, "
        "so later steps differ elsewhere too and fail"),
}


_REGISTRY: dict[str, ModelPair] = {}


def register(pair: ModelPair, *, replace: bool = False) -> ModelPair:
    """Add `pair` to the registry under `pair.name` (refuses to shadow one unless `replace`)."""
    if not isinstance(pair, ModelPair):
        raise UsageTypeError(f"register: expected a ModelPair, got {type(pair).__name__}")
    if pair.name in _REGISTRY and not replace:
        raise UsageError(f"register: a pair named {pair.name!r} exists; pass replace=True to override it")
    _REGISTRY[pair.name] = pair
    return pair


def get(name: str) -> ModelPair:
    """The registered pair called `name`."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown model pair {name!r}; known pairs: {names()}; "
                       "register your own with comparisons.models.register(ModelPair(...))") from None


def names() -> list[str]:
    """Names of the registered pairs, sorted."""
    return sorted(_REGISTRY)
