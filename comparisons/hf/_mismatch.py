"""What hf.pair checks before anything else: are the two models twins (one family, one head, one config), do the
given `variables=` fit the Flax model, and is dropout off? A mismatch is named in one line; found later it would read
as a Flax path missing from the mapping, with a `flax_path` hint that cannot help. Active dropout would fail as
flax's InvalidRngError, or as a `port` difference: torch and JAX draw different masks."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from comparisons.errors import ComparisonError, UsageError, UsageTypeError
from comparisons.models.checks import active_dropout

# config entries that say nothing about the computation compared (bookkeeping, what the call returns)
_NOT_THE_MODEL = {"transformers_version", "return_dict", "output_hidden_states", "output_attentions",
                  "torchscript", "use_bfloat16", "_name_or_path", "torch_dtype", "dtype"}


def check_twins(name: str, torch_model: Any, flax_model: Any, variables: Any) -> None:
    """Refuse two models of different families or heads, configs that differ, or `variables` that do not fit the
    Flax model, naming the classes, the config keys with both values, or the variable paths and shapes.

    Costs reading both configs and, with `variables`, flattening them and the Flax model's shape tree (no trace).
    """
    where = f"hf.pair({name!r})"
    torch_name, flax_name = type(torch_model).__name__, type(flax_model).__name__
    twin = _flax_twin_name(torch_name)
    torch_config, flax_config = getattr(torch_model, "config", None), getattr(flax_model, "config", None)
    families = getattr(torch_config, "model_type", None), getattr(flax_config, "model_type", None)
    if all(families) and families[0] != families[1]:
        raise UsageError(f"{where}: the torch model is {torch_name} (model_type {families[0]!r}) and the Flax model "
                         f"{flax_name} (model_type {families[1]!r}): two families, not twins; pass {twin}(config, "
                         "_do_init=False) with the torch model's config")
    if _from_transformers(torch_model, flax_model) and _head(torch_name) != _head(flax_name):
        raise UsageError(f"{where}: the heads differ: torch {torch_name}, Flax {flax_name} (a head's parameters "
                         f"would exist on one side only); pass {twin}(config, _do_init=False), the head of the torch "
                         "model, or the torch class of the Flax head")
    if torch_config is not None and flax_config is not None:
        _check_configs(where, torch_config, flax_config, torch_name, twin)
    if variables is not None:
        _check_variables(where, variables, flax_model)


# config entries that switch on random masks or skips in a training forward
_DROPOUT_WORDS = ("dropout", "pdrop", "drop_path", "layerdrop")


def check_no_dropout(name: str, torch_model: Any, inputs: tuple) -> None:
    """Refuse a training comparison with dropout on, naming the config keys (with their values) to set to 0 and the
    torch dropout modules they switch on: torch and JAX draw different masks, so no number could compare (until
    the two share masks). A positive rate no module uses (GPT-2's summary_first_dropout beside an LM head) is no
    dropout: without an active nn.Dropout, two training forwards under two seeds must differ to refuse (functional
    dropout). Costs reading the config, walking the modules and, then only, two torch forwards on `inputs`."""
    config = getattr(torch_model, "config", None)
    keys = _dropout_keys(config.to_dict()) if config is not None else []
    modules = active_dropout(torch_model)
    if not modules and not (keys and _random_in_training(torch_model, inputs)):
        return
    set_to_zero = ", ".join(f"{key}=0.0" for key, _ in keys)
    raise ComparisonError(
        f"hf.pair({name!r}): dropout is on in a training comparison: "
        + (f"config {', '.join(f'{key}={value}' for key, value in keys)}" if keys else "")
        + (f"{'; ' if keys else ''}torch modules {', '.join(modules[:3])}"
           f"{f' and {len(modules) - 3} more' if len(modules) > 3 else ''}" if modules else "")
        + "; torch and JAX draw different random masks, so no output or gradient could compare: "
        + (f"build both models from a config with {set_to_zero}" if keys else "set their p to 0"))


def _random_in_training(torch_model: Any, inputs: tuple) -> bool:
    """Whether two training forwards of `torch_model` on `inputs` under two seeds differ (its buffers restored)."""
    import torch

    saved = {n: b.clone() for n, b in torch_model.named_buffers()}
    was_training, outputs = torch_model.training, []
    torch_model.train()
    try:
        with torch.no_grad():
            for seed in (0, 1):
                with torch.random.fork_rng(devices=[]):
                    torch.manual_seed(seed)
                    output = torch_model(*(torch.from_numpy(x) for x in inputs))
                outputs.append([v for v in output.values() if isinstance(v, torch.Tensor)])
    finally:
        torch_model.train(was_training)
        with torch.no_grad():
            for n, b in torch_model.named_buffers():
                b.copy_(saved[n])
    return any(not torch.equal(a, b) for a, b in zip(*outputs))


def _dropout_keys(entries: dict, prefix: str = "") -> list[tuple[str, float]]:
    """(dotted key, value) of every positive float dropout rate in a config dict, sub-configs included."""
    found = []
    for key, value in entries.items():
        if isinstance(value, dict):
            found += _dropout_keys(value, f"{prefix}{key}.")
        elif isinstance(value, float) and value > 0 and any(word in key for word in _DROPOUT_WORDS):
            found.append((f"{prefix}{key}", value))
    return found


def _head(class_name: str) -> str:
    """A class name without its framework marks: 'FlaxBertForMaskedLMModule' -> 'BertForMaskedLM'; torch's
    'XLMHeadModel' is Flax's 'XForCausalLM' (BERT's causal head: BertLMHeadModel / FlaxBertForCausalLM)."""
    bare = class_name.removeprefix("Flax").removesuffix("Module")
    return bare[:-len("LMHeadModel")] + "ForCausalLM" if bare.endswith("LMHeadModel") else bare


def _flax_twin_name(torch_name: str) -> str:
    """The transformers Flax class twin of a torch class name (FlaxGPT2LMHeadModel, FlaxBertForCausalLM)."""
    import transformers

    same = f"Flax{torch_name}"
    return same if hasattr(transformers, same) else f"Flax{_head(torch_name)}"


def _from_transformers(torch_model: Any, flax_model: Any) -> bool:
    flax_class = type(getattr(flax_model, "module", flax_model))
    return all(c.__module__.startswith("transformers.") for c in (type(torch_model), flax_class))


def _check_configs(where: str, torch_config: Any, flax_config: Any, torch_name: str, twin: str) -> None:
    """Refuse integer or boolean config entries (sizes, counts, ids, tie_word_embeddings) that differ."""
    theirs = flax_config.to_dict()
    differing = [(key, value, theirs[key]) for key, value in torch_config.to_dict().items()
                 if key in theirs and key not in _NOT_THE_MODEL and not key.startswith("_")
                 and isinstance(value, (int, bool)) and isinstance(theirs[key], (int, bool)) and value != theirs[key]]
    if differing:
        differing.sort(key=lambda entry: entry[0] != "tie_word_embeddings")  # the one a mapping trips on first
        named = ", ".join(f"{key} ({mine} in torch, {other} in Flax)" for key, mine, other in differing)
        raise UsageError(f"{where}: the two configs differ in {named}; build both from one config: "
                         f"{torch_name}(config) and {twin}(config, _do_init=False)")


def _check_variables(where: str, variables: Any, flax_model: Any) -> None:
    """Refuse `variables` that are not a mapping, or whose paths or shapes are not the Flax model's."""
    from flax.traverse_util import flatten_dict

    flax_name = type(flax_model).__name__
    fix = (f"pass the variables of this {flax_name} (its from_pretrained(..., from_pt=True).params, or "
           "hf.from_pt_variables), or leave variables= out to convert the torch weights")
    if not isinstance(variables, Mapping):
        raise UsageTypeError(f"{where}: variables={_short(variables)} is not a mapping of Flax variables; {fix}")
    expected_tree = getattr(flax_model, "params_shape_tree", None)
    if expected_tree is None:  # a bare linen module: its variables are checked against its init later
        return
    given, expected = (
        {".".join(map(str, k)): tuple(getattr(v, "shape", ())) for k, v in flatten_dict(_wrapped(tree)).items()}
        for tree in (variables, expected_tree))
    missing = [p for p in expected if p not in given]
    unexpected = [p for p in given if p not in expected]
    reshaped = [f"{p} {given[p]} given, {expected[p]} expected" for p in expected
                if p in given and given[p] != expected[p]]
    if missing or unexpected or reshaped:
        parts = [*([f"{len(missing)} of its {len(expected)} leaves missing (e.g. {missing[0]})"] if missing else []),
                 *([f"{len(unexpected)} it does not have (e.g. {unexpected[0]})"] if unexpected else []),
                 *([f"shapes differ at {', '.join(reshaped[:3])}"] if reshaped else [])]
        raise UsageError(f"{where}: variables= do not fit {flax_name}: {'; '.join(parts)}; {fix}")


def _wrapped(tree: Any) -> dict:
    tree = dict(tree)
    return tree if "params" in tree else {"params": tree}


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}... (a {type(value).__name__})"
