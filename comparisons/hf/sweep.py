"""Every transformers family with both a torch and a Flax class, built tiny and run through compare().

    python -m comparisons.hf.sweep [--strategies explicit] [--only gpt2,bert] [--write results.json]
    python -m comparisons.hf.sweep --heads [--only bert] [--strategies explicit] [--write heads.json]

`families()` reads transformers' own auto mappings (never a hand list): a family is in the sweep
when one task maps it to a torch class and a Flax class. `tiny_config` shrinks the family's
default config (hidden 16, one or two layers, vocabulary 64, 8x8 images, dropout off, special ids
inside the vocabulary); `run_family` builds `hf.pair(family, T(config), F(config, _do_init=False))`
and nothing else, and runs it through compare() with every strategy on an uneven batch (5 on 2
devices). Each family ends in one `Outcome`: pass, known_difference, refusal, version_note, fail
or error, with the reason and the seconds. A family costs one to a few tens of seconds on a CPU.
`--heads` runs every other Flax class of each family's modeling module (`heads()`: sequence and token
classification, multiple choice, question answering, pre-training, CTC, encoder-only models) the same way.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

# Tasks in the order a family's pair is picked: the first task both frameworks map it in wins.
TASKS = ("MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
         "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES", "MODEL_FOR_VISION_2_SEQ_MAPPING_NAMES",
         "MODEL_FOR_MASKED_LM_MAPPING_NAMES", "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES", "MODEL_MAPPING_NAMES")

_SIZES = {  # attribute -> tiny value, set only where the family's config has the attribute
    "hidden_size": 16, "n_embd": 16, "d_model": 16, "embed_dim": 16, "intermediate_size": 32, "ffn_dim": 32,
    "encoder_ffn_dim": 32, "decoder_ffn_dim": 32, "d_ff": 32, "d_kv": 8, "head_dim": 8, "n_inner": 32,
    "num_hidden_layers": 2, "n_layer": 2, "num_layers": 2, "encoder_layers": 1, "decoder_layers": 1,
    "num_decoder_layers": 1, "num_attention_heads": 2, "n_head": 2, "num_heads": 2, "attention_heads": 2,
    "encoder_attention_heads": 2, "decoder_attention_heads": 2, "num_key_value_heads": 2, "vocab_size": 64,
    "max_position_embeddings": 32, "n_positions": 32, "max_target_positions": 16, "max_source_positions": 8,
    "image_size": 8, "patch_size": 4, "embedding_size": 16, "projection_dim": 8, "word_embed_proj_dim": 16,
    "rotary_dim": 4, "relative_attention_num_buckets": 8, "relative_attention_max_distance": 16,
    "num_mel_bins": 8, "conv_dim": (16, 16), "conv_kernel": (10, 3), "conv_stride": (5, 2),
    "num_conv_pos_embeddings": 4, "num_conv_pos_embedding_groups": 2, "hidden_sizes": [8, 16], "depths": [1, 1],
    "groups_width": 8, "window_size": 4, "local_radius": 2, "global_block_size": 4, "decoder_vocab_size": 64,
    "use_cache": False, "layerdrop": 0.0, "encoder_layerdrop": 0.0, "decoder_layerdrop": 0.0,
    # SpecAugment off (its masks are random), yet mask_time_prob > 0 so torch builds masked_spec_embed as Flax does
    "mask_time_prob": 0.05, "mask_feature_prob": 0.0, "apply_spec_augment": False, "attention_type": "original_full",
}
_SPECIAL = {"bos_token_id": 0, "pad_token_id": 1, "eos_token_id": 2, "decoder_start_token_id": 2,
            "unk_token_id": 3, "sep_token_id": 4, "cls_token_id": 5, "mask_token_id": 6}
# composite families take sub-configs of other families
_PARTS = {"encoder-decoder": ("bert", "bert"), "vision-encoder-decoder": ("vit", "gpt2"),
          "speech-encoder-decoder": ("wav2vec2", "bert"), "vision-text-dual-encoder": ("vit", "bert")}


@dataclass(frozen=True)
class Outcome:
    """How one family ended: status (pass | known_difference | refusal | version_note | fail | error)."""
    family: str
    torch_class: str
    flax_class: str
    status: str
    reason: str
    seconds: float


def families() -> dict[str, tuple[str, str]]:
    """{family: (torch class name, Flax class name)} from transformers' auto mappings, in name order."""
    from transformers.models.auto import modeling_auto, modeling_flax_auto

    found: dict[str, tuple[str, str]] = {}
    tasks = [t for t in dir(modeling_flax_auto) if t.startswith("FLAX_") and t.endswith("_MAPPING_NAMES")]
    ordered = [*TASKS, *sorted(t[len("FLAX_"):] for t in tasks if t[len("FLAX_"):] not in TASKS)]
    for task in ordered:
        torch_names = getattr(modeling_auto, task, {})
        for family, flax_name in getattr(modeling_flax_auto, "FLAX_" + task, {}).items():
            if family in torch_names and family not in found:
                found[family] = (torch_names[family], flax_name)
    return dict(sorted(found.items()))


def heads(family: str, flax_class: str) -> list[tuple[str, str]]:
    """[(torch class, Flax class)] of the family's other heads: every public Flax model class in the module
    that defines `flax_class` whose torch twin (the name less 'Flax') transformers exports, in name order."""
    import importlib

    import transformers

    module = importlib.import_module(getattr(transformers, flax_class).__module__)
    found = []
    for name in sorted(vars(module)):
        value = getattr(module, name)
        if (not name.startswith("Flax") or name == flax_class or name.endswith(("PreTrainedModel", "Module"))
                or not isinstance(value, type) or value.__module__ != module.__name__
                or not hasattr(value, "module_class")):
            continue
        torch_name = name[len("Flax"):]
        if hasattr(transformers, torch_name):
            found.append((torch_name, name))
    return found


def tiny_config(family: str) -> Any:
    """The family's default config, shrunk (see the module docstring); composites from tiny parts."""
    from transformers import CONFIG_MAPPING

    config_class = CONFIG_MAPPING[family]
    if family in _PARTS:
        first, second = (tiny_config(part) for part in _PARTS[family])
        if family == "vision-text-dual-encoder":
            return config_class.from_vision_text_configs(first, second, projection_dim=8)
        second.is_decoder, second.add_cross_attention = True, True
        if family == "speech-encoder-decoder":  # Flax initialises its decoder on the encoder's frame count
            second.max_position_embeddings = 128
        config = config_class.from_encoder_decoder_configs(first, second)
        config.decoder_start_token_id, config.pad_token_id = second.bos_token_id or 0, second.pad_token_id or 1
        return config
    config = config_class()
    _shrink(config, family)
    for sub in ("text_config", "vision_config"):
        if getattr(config, sub, None) is not None:
            _shrink(getattr(config, sub), family)
    return config


def head_config(family: str, torch_class: str) -> Any:
    """The tiny config `torch_class` is built on: the family's (`tiny_config`), or the part of it of the class the
    head takes (CLIPTextModel takes the CLIP config's text_config, CLIPVisionModel its vision_config). Costs one
    `tiny_config`."""
    import transformers

    config = tiny_config(family)
    wanted = getattr(transformers, torch_class).config_class
    if isinstance(config, wanted):
        return config
    return next((part for part in vars(config).values() if isinstance(part, wanted)), config)


def _shrink(config: Any, family: str) -> None:
    for name, value in _SIZES.items():
        if hasattr(config, name):
            setattr(config, name, value)
    for name in list(vars(config)):
        if any(w in name for w in ("dropout", "pdrop", "drop_path")) and isinstance(getattr(config, name), float):
            setattr(config, name, 0.0)
    for name, value in _SPECIAL.items():
        if isinstance(getattr(config, name, None), int):
            setattr(config, name, value)
    for fixed in ("pooler_output_size", "output_hidden_size"):  # ViT, wav2vec2 copy hidden_size when built
        if getattr(config, fixed, None) is not None:
            setattr(config, fixed, config.hidden_size)
    if hasattr(config, "do_stable_layer_norm"):  # transformers' Flax wav2vec2 supports only this layout
        config.do_stable_layer_norm, config.feat_extract_norm = True, "layer"
    if hasattr(config, "num_feat_extract_layers"):
        config.num_feat_extract_layers = len(config.conv_dim)
    if family == "gpt_neo":
        config.attention_types, config.attention_layers = [[["global", "local"], 1]], ["global", "local"]
    if getattr(config, "num_labels", None) is not None and family in ("resnet", "regnet", "beit", "dinov2", "vit"):
        config.num_labels = 3


def run_family(family: str, torch_class: str, flax_class: str, *, strategies: Sequence[str] | None = None,
               batch_size: int = 5, devices: int = 2) -> Outcome:
    """Build the tiny pair with hf.pair alone and run it through compare(); never raises."""
    import torch
    import transformers

    from comparisons.errors import ComparisonError
    from comparisons.harness import compare
    from comparisons.hf import BatchDependentOutput, TrainingModeIgnored, VersionNote, pair, version_note

    start = time.perf_counter()

    def outcome(status: str, reason: str) -> Outcome:
        return Outcome(family, torch_class, flax_class, status, reason, round(time.perf_counter() - start, 1))
    try:
        note = version_note(getattr(transformers, flax_class))
        if note:
            return outcome("version_note", note)
        config = head_config(family, torch_class)
        torch.manual_seed(0)
        if torch_class.endswith("ForCausalLM") and hasattr(config, "is_decoder"):
            config.is_decoder = True  # a causal LM head on a BERT-like encoder is causal only when told
        torch_model = getattr(transformers, torch_class)(config)
        flax_model = _flax_model(getattr(transformers, flax_class), config)
        hf_pair = pair(family, torch_model, flax_model)
        report = compare(hf_pair, batch_size=batch_size, devices=devices, strategies=strategies, steps=1,
                         torch_devices="cpu")
    except VersionNote as note:
        return outcome("version_note", _first_line(note))
    except (BatchDependentOutput, TrainingModeIgnored) as refusal:
        return outcome("refusal", _first_line(refusal))
    except ComparisonError as error:
        return outcome("error", f"{type(error).__name__}: {_first_line(error)}")
    except Exception as error:  # noqa: BLE001  (the sweep records every family's end, whatever it is)
        return outcome("error", f"{type(error).__name__}: {_first_line(error)}")
    return outcome(*_verdict(report))


def _flax_model(flax_class: Any, config: Any) -> Any:
    """`flax_class(config, _do_init=False)`; composites (encoder-decoder) refuse that, and are initialised."""
    try:
        return flax_class(config, _do_init=False)
    except ValueError as error:
        if "_do_init" not in str(error):
            raise
        return flax_class(config)


def _verdict(report: Any) -> tuple[str, str]:
    failed = [c for c in report.checks if not c.passed]
    if failed:
        return "fail", "; ".join(f"{c.subject} ({c.compared}): {_first_line(c.detail, 160)}" for c in failed[:3])
    known = [c.compared for c in report.checks if c.subject == "known_difference"]
    if known:
        return "known_difference", _known_differences(known)
    return "pass", ""


def _known_differences(compared: Sequence[str]) -> str:
    """'float32 islands (explicit, pmap)' from checks compared as 'torch vs jax:explicit: float32 islands', ..."""
    runs_by_kind: dict[str, list[str]] = {}
    for label in compared:
        run, _, kind = label.rpartition(": ")
        runs = runs_by_kind.setdefault(kind, [])
        strategy = run.rpartition("jax:")[2]
        if strategy and strategy not in runs:
            runs.append(strategy)
    return "; ".join(f"{kind} ({', '.join(sorted(runs))})" if runs else kind for kind, runs in
                     sorted(runs_by_kind.items()))


def _first_line(text: Any, limit: int = 300) -> str:
    line = str(text).strip().splitlines()[0] if str(text).strip() else ""
    return line if len(line) <= limit else line[:limit - 3] + "..."


def sweep(only: Sequence[str] | None = None, *, strategies: Sequence[str] | None = None) -> list[Outcome]:
    """run_family for every family (or those in `only`), in name order."""
    return [run_family(f, *classes, strategies=strategies) for f, classes in families().items()
            if not only or f in only]


def record(outcomes: Sequence[Outcome], strategies: Sequence[str] | None) -> dict:
    """The outcomes with the versions and settings they were measured under (docs/hf_families.json)."""
    import jax
    import torch
    import transformers

    import dp_jax

    return {"transformers": transformers.__version__, "jax": jax.__version__, "torch": torch.__version__.split("+")[0],
            "strategies": list(strategies or dp_jax.STRATEGIES), "batch_size": 5, "devices": 2,
            "outcomes": [asdict(o) for o in outcomes]}


def main(argv: Sequence[str] | None = None) -> int:
    import argparse
    import json

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated families (default: all)")
    parser.add_argument("--strategies", default="", help="comma-separated dp_jax strategies (default: all)")
    parser.add_argument("--write", default="", help="write the outcomes to this JSON file")
    parser.add_argument("--heads", action="store_true", help="each family's other Flax heads instead (heads())")
    parser.add_argument("--classes", default="", help="with --heads: comma-separated torch classes (default: all)")
    args = parser.parse_args(argv)
    only = [f for f in args.only.split(",") if f]
    classes_wanted = [c for c in args.classes.split(",") if c]
    strategies = [s for s in args.strategies.split(",") if s] or None
    outcomes = []
    for family, classes in families().items():
        if only and family not in only:
            continue
        runs = [c for c in heads(family, classes[1]) if not classes_wanted or c[0] in classes_wanted] \
            if args.heads else [classes]
        for torch_class, flax_class in runs:
            outcomes.append(run_family(family, torch_class, flax_class, strategies=strategies))
            o = outcomes[-1]
            print(f"{o.family:26s} {o.torch_class:40s} {o.status:16s} {o.seconds:6.1f}s {o.reason}", flush=True)
    if args.write:
        with open(args.write, "w") as f:
            json.dump(record(outcomes, strategies), f, indent=1)
            f.write("\n")
    print(f"{sum(o.status == 'pass' for o in outcomes)} of {len(outcomes)} pass; "
          f"{sum(o.seconds for o in outcomes):.0f} s in all")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
