"""What hf.pair refuses before any run: wrong arguments, outputs no DataParallel gathers, versions that cannot run."""
from __future__ import annotations

import inspect
import sys
from typing import Any

from comparisons.errors import ComparisonError, UsageTypeError


class VersionNote(ComparisonError):
    """This family cannot run with the installed versions (a one-line note naming them), not a DP difference."""


class BatchDependentOutput(ComparisonError):
    """An output whose shape depends on the whole batch (contrastive logits): no DataParallel can gather it."""


class TrainingModeIgnored(ComparisonError):
    """The Flax port runs some BatchNorm layers in inference mode while training: another function than torch's."""


def check_training_mode(name: str, call: Any, inputs: tuple) -> None:
    """Refuse a Flax model whose BatchNorm statistics do not move in a training forward.

    transformers 4.57's FlaxRegNetYLayer calls its layers without `deterministic`, so they normalise with
    running statistics while training, where torch's normalise by the batch: outputs differ by ~0.3 and
    no comparison of the training step can tell DataParallel from that. Costs one Flax init and one
    training forward on `inputs` (a batch of 2), only for a model with batch statistics.
    """
    import jax
    import numpy as np
    from flax.traverse_util import flatten_dict

    if not getattr(call, "full_variables", False):
        return
    variables = call.init(jax.random.key(0), *inputs)
    _, updates = call.apply(variables, *inputs, train=True, mutable=["batch_stats"])
    before, after = flatten_dict(dict(variables["batch_stats"])), flatten_dict(dict(updates["batch_stats"]))
    still = sorted({"/".join(k[:-1]) for k, v in before.items() if np.array_equal(np.asarray(v), after[k])})
    layers = {"/".join(k[:-1]) for k in before}
    if still:
        import transformers

        raise TrainingModeIgnored(
            f"hf.pair({name!r}): {len(still)} of {len(layers)} BatchNorm layers of transformers "
            f"{transformers.__version__}'s {type(call.model).__name__} keep their running statistics in a training "
            f"forward (e.g. {still[0]}): its Flax code does not pass train/deterministic down to them, so they "
            "normalise with running statistics while torch's normalise by the batch. The two compute different "
            "training steps whatever the parallelism (not a DataParallel difference); the family "
            "can be compared once its Flax port passes the flag down")


def check_models(name: str, torch_model: Any, flax_model: Any, make_inputs: Any) -> None:
    """Refuse what is not a torch model, a Flax model or a make_inputs, and tokens the model cannot embed."""
    import flax.linen as nn
    import torch

    where = f"hf.pair({name!r})"
    if not isinstance(torch_model, torch.nn.Module):
        raise UsageTypeError(f"{where}: torch_model={torch_model!r} is not a torch.nn.Module; pass the transformers "
                             "torch model, e.g. GPT2LMHeadModel(config)")
    if not isinstance(getattr(flax_model, "module", flax_model), nn.Module):
        raise UsageTypeError(f"{where}: flax_model={flax_model!r} is not a transformers Flax model nor a "
                             "flax.linen.Module; pass its Flax twin, e.g. FlaxGPT2LMHeadModel(config, _do_init=False)")
    if make_inputs is not None and not callable(make_inputs):
        raise UsageTypeError(f"{where}: make_inputs={make_inputs!r} is not callable; pass (batch_size, seed, dtype) "
                             "-> (inputs, targets), e.g. hf.token_inputs(vocab=50, length=7), or leave it out to "
                             "derive the inputs from the model")
    check_random_masking(name, torch_model)
    config = getattr(torch_model, "config", None)
    for argument, limit_name in (("length", "n_positions"), ("length", "max_position_embeddings"),
                                 ("vocab", "vocab_size")):
        value, limit = getattr(make_inputs, argument, None), getattr(config, limit_name, None)
        if isinstance(value, int) and isinstance(limit, int) and value > limit:
            what = f"tokens of length {value}" if argument == "length" else f"token ids up to {value - 1}"
            raise ComparisonError(f"{where}: make_inputs=token_inputs({argument}={value}) makes {what}, but "
                                  f"{type(torch_model).__name__}'s config has {limit_name}={limit}; pass "
                                  f"token_inputs({argument} <= {limit}, ...)")


class RandomMasking(ComparisonError):
    """The torch model masks at random while training where its Flax twin never does (SpecAugment)."""


def check_random_masking(name: str, torch_model: Any) -> None:
    """Refuse SpecAugment on in torch: wav2vec2-like torch models mask random time steps and features while
    training (`apply_spec_augment` with `mask_time_prob` or `mask_feature_prob` > 0); transformers' Flax
    `__call__` masks only where the caller passes `mask_time_indices`, so the two train on different inputs."""
    config = getattr(torch_model, "config", None)
    probabilities = {key: getattr(config, key, 0.0) or 0.0 for key in ("mask_time_prob", "mask_feature_prob")}
    on = {key: value for key, value in probabilities.items() if value > 0}
    if getattr(config, "apply_spec_augment", False) and on:
        shown = ", ".join(f"{key}={value}" for key, value in on.items())
        raise RandomMasking(
            f"hf.pair({name!r}): {type(torch_model).__name__} masks random time steps while training (SpecAugment: "
            f"apply_spec_augment=True, {shown}) and its Flax twin never does: the two would train on different "
            "inputs, whatever the parallelism. Set config.apply_spec_augment=False before building both models (the "
            "masks then stay off; torch keeps masked_spec_embed, as Flax does)")


def version_note(flax_class: type) -> str | None:
    """One line when `flax_class`'s code calls `jnp.clip(a_max=)` and this JAX refuses it, else None.

    transformers 4.57's Flax T5, mT5 and LongT5 do (even building one with `_do_init=False` fails);
    JAX removed the keyword. Costs one tiny jnp.clip, and reading the class's source files.
    """
    import jax
    import jax.numpy as jnp
    import transformers

    sources = {c.__module__ for c in flax_class.__mro__ if c.__module__.startswith("transformers.")}
    if not any("a_max=" in _source(module) for module in sources):
        return None
    try:
        jnp.clip(jnp.zeros(1), a_max=1.0)
    except TypeError:
        return (f"transformers {transformers.__version__}'s {flax_class.__name__} calls jnp.clip(a_max=), which "
                f"JAX {jax.__version__} removed: this family cannot run with these versions (not a DataParallel "
                "difference)")
    return None


def check_versions(name: str, flax_model: Any) -> None:
    """Raise VersionNote when the Flax model's code cannot run with the installed JAX (`version_note`)."""
    note = version_note(type(flax_model))
    if note:
        raise VersionNote(f"hf.pair({name!r}): {note}")


def _source(module_name: str) -> str:
    try:
        return inspect.getsource(sys.modules[module_name])
    except (KeyError, OSError, TypeError):
        return ""


def probe_outputs(name: str, torch_model: Any, make_batch: Any) -> dict[str, tuple[int, ...]]:
    """{output field: shape} of the torch model on a batch of 2, refusing a field whose shape past the
    batch axis changes with the batch (contrastive logits: chunk x chunk per replica) and a scalar one
    (a reduction over the batch: wav2vec2 pre-training's codevector perplexity). Two forwards."""
    shapes = [_field_shapes(torch_model, make_batch(b)) for b in (2, 3)]
    for field, shape in shapes[0].items():
        if not shape:
            raise BatchDependentOutput(
                f"hf.pair({name!r}): output {field!r} is a scalar (shape ()) computed over the whole batch (a "
                "reduction, no batch axis): each replica would compute it over its chunk alone, and DataParallel "
                "gathers one per replica (stock nn.DataParallel warns and returns a vector of them), so no "
                "DataParallel reproduces it. Compare a head whose outputs all have a batch axis instead (the "
                "family's base model, e.g. Wav2Vec2Model for Wav2Vec2ForPreTraining)")
        other = shapes[1].get(field)
        if other is not None and (shape[1:] != other[1:] or shape[0] != 2):
            raise BatchDependentOutput(
                f"hf.pair({name!r}): output {field!r} has shape {shape} for a batch of 2 and {other} for 3: it "
                "depends on the whole batch (each row scored against every other), so each replica would compute "
                "it over its chunk alone and no DataParallel can gather it; stock nn.DataParallel fails the same "
                "way. Compare the model's embeddings instead (its vision/text towers), with loss= on them")
    return shapes[0]


def _field_shapes(torch_model: Any, inputs: tuple) -> dict[str, tuple[int, ...]]:
    import torch

    was_training = torch_model.training
    torch_model.eval()
    try:
        with torch.no_grad():
            output = torch_model(*(torch.from_numpy(x) for x in inputs))
    finally:
        torch_model.train(was_training)
    return {k: tuple(v.shape) for k, v in output.items() if isinstance(v, torch.Tensor)}


def unreached_parameters(torch_model: Any, inputs: tuple, field: str) -> set[str]:
    """Names of trainable torch parameters the output `field` does not reach (one forward and backward;
    the model's gradients are left as they were: None)."""
    import torch

    was_training = torch_model.training
    torch_model.eval()
    try:
        output = torch_model(*(torch.from_numpy(x) for x in inputs))
        output[field].float().sum().backward()
        unreached = {n for n, p in torch_model.named_parameters() if p.requires_grad and p.grad is None}
    finally:
        torch_model.zero_grad(set_to_none=True)
        torch_model.train(was_training)
    return unreached


class FlaxOnlyParameter(ComparisonError):
    """The Flax model holds a parameter its torch twin does not build (the torch config turned it off)."""


# how to make torch build a parameter its config turned off, without changing what either side computes
_TURN_ON = {"masked_spec_embed": "set config.mask_time_prob=0.05 and config.apply_spec_augment=False before "
                                 "building both models (torch then builds it, and no mask is ever drawn)"}


def check_flax_only(name: str, torch_model: Any, flax_flat: Any) -> None:
    """Refuse Flax parameters held directly by a module whose torch twin (a container, not a converted
    layer) holds no such parameter: the torch config turned it off (wav2vec2's `masked_spec_embed`, built
    in torch only when mask_time_prob or mask_feature_prob > 0, in Flax always). Names each one and the
    config that makes torch build it; no mapping can give it a torch value."""
    from comparisons.convert import kind_of

    modules = dict(torch_model.named_modules())
    found = [key for key in flax_flat if key[0] == "params" and len(key) >= 3
             and (owner := modules.get(".".join(key[1:-1]))) is not None
             and kind_of(owner) is None and not hasattr(owner, key[-1])]
    if found:
        key = found[0]
        fix = _TURN_ON.get(key[-1], "set the torch config so that torch builds it too (see its modeling code)")
        raise FlaxOnlyParameter(
            f"hf.pair({name!r}): the Flax model holds {'/'.join(key[1:])} (of {len(found)} such), which its torch "
            f"twin {type(modules['.'.join(key[1:-1])]).__name__} does not build with this config, so there is no "
            f"torch value to start the Flax side from: {fix}")


def absent_in_flax(torch_model: Any, flax_flat: Any, removable: set[str]) -> list[str]:
    """Torch parameter names whose module has no Flax twin and that the comparison may leave out:
    frozen ones (sinusoidal positions: Flax computes them) and those in `removable` (unreached)."""
    modules = {key[1:-1][:i] for key in flax_flat for i in range(len(key) - 1)}
    absent = []
    for name, parameter in torch_model.named_parameters():
        path = tuple(name.split(".")[:-1])
        if path not in modules and (not parameter.requires_grad or name in removable):
            absent.append(name)
    return absent
