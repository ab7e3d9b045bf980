"""make_inputs for transformers models: given (`token_inputs`, `image_inputs`) or derived from the model.

A derived maker reads the model: its `main_input_name` says what the batch is (token ids, pixels,
audio values, log-mel features), its config the sizes (vocabulary, image size, channels, the
feature extractor's strides, mel bins), and `is_encoder_decoder` whether decoder ids are needed
(first id the config's decoder start). Each sub-model's ids come from its own config (an encoder-decoder's
encoder and decoder vocabularies differ). Token ids avoid the config's special and pad ids, so no row is
masked or padded by accident; the decoder's start id is the one exception (Marian starts with the pad id).
What a head reads follows transformers: a multiple-choice head takes (batch, choices, length); a seq2seq
classification head reads the hidden state at each row's <eos> (one, last, decoder as long as the encoder);
a question-answering head that derives token types from the question length gets them explicitly, as its
torch `forward` computes them. Labels match the head's logits, read once from a probe.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from comparisons.errors import ComparisonError, positive_integer

MakeInputs = Callable[[int, int, Any], tuple]
_SPECIAL_IDS = ("pad_token_id", "bos_token_id", "eos_token_id", "unk_token_id", "sep_token_id", "cls_token_id",
                "mask_token_id", "decoder_start_token_id")
TOKEN_LENGTH, DECODER_LENGTH, AUDIO_FRAMES, CHOICES = 7, 5, 6, 2


def token_inputs(vocab: int, length: int) -> MakeInputs:
    """make_inputs for a language model: token ids (B, length) and next-token-like labels (B, length)."""
    _positive("token_inputs", vocab=vocab, length=length)

    def make(batch_size: int, seed: int, dtype: Any) -> tuple:
        rng = np.random.default_rng(seed)
        ids = rng.integers(0, vocab, (batch_size, length)).astype(np.int32)
        return (ids,), rng.integers(0, vocab, (batch_size, length)).astype(np.int32)
    make.vocab, make.length = vocab, length  # type: ignore[attr-defined]  # hf.pair checks them against the config
    return make


def image_inputs(channels: int, size: int, classes: int) -> MakeInputs:
    """make_inputs for an image classifier: NCHW pixels (B, channels, size, size) and labels (B,)."""
    _positive("image_inputs", channels=channels, size=size, classes=classes)

    def make(batch_size: int, seed: int, dtype: Any) -> tuple:
        rng = np.random.default_rng(seed)
        pixels = rng.standard_normal((batch_size, channels, size, size)).astype(dtype)
        return (pixels,), rng.integers(0, classes, batch_size).astype(np.int32)
    make.layout = "NCHW"  # type: ignore[attr-defined]
    return make


def _positive(function: str, **arguments: Any) -> None:
    for argument, value in arguments.items():
        positive_integer(value, argument=argument, caller=f"hf.{function}",
                         example=f", e.g. {function}({argument}=8, ...)")


def model_inputs(torch_model: Any) -> tuple[dict[str, Callable], list[str]]:
    """{input name: (rng, batch_size, dtype) -> array} for what the model needs, and the names in order.

    The order is torch's `forward` order (the harness passes inputs positionally to torch); an
    attention mask between two needed inputs is filled with ones, as transformers fills it. A maker
    marked `from_ids` takes the main input ids instead (token types computed from them).
    """
    config = torch_model.config
    main = torch_model.main_input_name
    makers = {main: _main_input(main, torch_model)}
    if main == "input_ids" and "pixel_values" in _call_names(torch_model):  # CLIP-like: text and images
        makers["pixel_values"] = _main_input("pixel_values", torch_model)
    if getattr(config, "is_encoder_decoder", False):
        length = TOKEN_LENGTH if _reads_eos(torch_model) else DECODER_LENGTH  # the eos mask indexes decoder states
        makers["decoder_input_ids"] = _decoder_ids(config, length)
    if main == "input_ids" and "question_lengths" in _call_names(torch_model):
        makers["question_lengths"], makers["token_type_ids"] = _question_lengths(config), _question_token_types(config)
    return makers, _forward_order(torch_model, makers)


def _reads_eos(torch_model: Any) -> bool:
    """A seq2seq classification head (BART's): it reads the decoder state where the encoder ids hold <eos>."""
    return (getattr(torch_model.config, "is_encoder_decoder", False)
            and type(torch_model).__name__.endswith("ForSequenceClassification"))


def _multiple_choice(torch_model: Any) -> bool:
    return type(torch_model).__name__.endswith("ForMultipleChoice")


def _call_names(torch_model: Any) -> list[str]:
    from ._calling import call_signature
    return call_signature(torch_model)


def _forward_order(torch_model: Any, makers: dict[str, Callable]) -> list[str]:
    names = _call_names(torch_model)
    wanted = [n for n in names if n in makers]
    if len(wanted) != len(makers):
        raise ComparisonError(f"hf.pair: {type(torch_model).__name__}.forward takes {names[:6]}..., not the inputs "
                              f"{sorted(makers)} its config implies; pass make_inputs=")
    prefix = names[:names.index(wanted[-1]) + 1]
    for name in prefix:
        if name not in makers:
            if name != "attention_mask":
                raise ComparisonError(f"hf.pair: {type(torch_model).__name__}.forward takes {name!r} before "
                                      f"{wanted[-1]!r}, and only an attention mask can be filled; pass make_inputs=")
            makers[name] = _ones_like_main(makers[wanted[0]], torch_model.main_input_name)
    return prefix


def _main_input(name: str, torch_model: Any) -> Callable:
    config = torch_model.config
    if name == "input_ids":
        text = _sub_config(config, "encoder", "text_config")
        choices = (CHOICES,) if _multiple_choice(torch_model) else ()
        eos = getattr(text, "eos_token_id", None) if _reads_eos(torch_model) else None
        return _token_ids(text, length=min(TOKEN_LENGTH, _positions(text)), leading=choices, last=eos)
    if name == "pixel_values":
        vision = _sub_config(config, "vision_config", "encoder")
        size, channels = _image_size(vision), getattr(vision, "num_channels", 3)
        return lambda rng, b, dtype: rng.standard_normal((b, channels, size, size)).astype(dtype)
    if name in ("input_values", "inputs"):
        samples = _audio_samples(_sub_config(config, "encoder"))
        return lambda rng, b, dtype: rng.standard_normal((b, samples)).astype(dtype)
    if name == "input_features":
        mels, frames = config.num_mel_bins, 2 * config.max_source_positions  # whisper's two stride-2 convolutions
        return lambda rng, b, dtype: rng.standard_normal((b, mels, frames)).astype(dtype)
    raise ComparisonError(f"hf.pair: {type(torch_model).__name__}'s main input {name!r} is none that hf derives "
                          "(input_ids, pixel_values, input_values, input_features); pass make_inputs=")


def _token_ids(config: Any, length: int, first: int | None = None, *, leading: tuple[int, ...] = (),
               last: int | None = None) -> Callable:
    """Ids (B, *leading, length) in `config`'s vocabulary, avoiding its special ids; `first` / `last` set the
    first / last id of every row."""
    vocab = _vocab(config)
    special = {getattr(config, a, None) for a in _SPECIAL_IDS}
    allowed = np.array([i for i in range(vocab) if i not in special], dtype=np.int32)

    def make(rng, batch_size, dtype):
        ids = rng.choice(allowed, (batch_size, *leading, length))
        if first is not None:
            ids[..., 0] = first
        if last is not None:
            ids[..., -1] = last
        return ids.astype(np.int32)
    return make


def _decoder_ids(config: Any, length: int) -> Callable:
    """Decoder ids in the decoder's vocabulary, starting with the start id the model would use."""
    decoder = _decoder_config(config)
    return _token_ids(decoder, min(length, _positions(decoder)), first=decoder_start_id(config))


def decoder_start_id(config: Any) -> int | None:
    """The first decoder id: the config's decoder start (a composite's own, then its decoder's), else the
    decoder's bos; one past the decoder's vocabulary is skipped (a composite built from a GPT-2 decoder
    keeps GPT-2's bos 50256 beside a smaller vocabulary)."""
    decoder = _decoder_config(config)
    candidates = (getattr(config, "decoder_start_token_id", None), getattr(decoder, "decoder_start_token_id", None),
                  getattr(decoder, "bos_token_id", None))
    vocab = _vocab(decoder)
    return next((c for c in candidates if isinstance(c, int) and 0 <= c < vocab), None)


def decoder_starts_with_pad(torch_model: Any) -> bool:
    """Whether derived decoder ids hold the decoder's pad id (its start id is the pad id, as Marian's)."""
    config = torch_model.config
    if not getattr(config, "is_encoder_decoder", False):
        return False
    pad = getattr(_decoder_config(config), "pad_token_id", None)
    return pad is not None and decoder_start_id(config) == pad


def _question_lengths(config: Any) -> Callable:
    """transformers' question length (B, 1): up to and with the first <sep> (1 where a row holds none)."""
    sep = getattr(config, "sep_token_id", None)

    def make(ids):
        return (np.argmax(ids == sep, axis=-1) + 1).astype(np.int32)[:, None]
    make.from_ids = True  # type: ignore[attr-defined]
    return make


def _question_token_types(config: Any) -> Callable:
    """transformers' token types for a question-answering head: 0 over the question, 1 after it. Its torch
    `forward` computes them when none are given; its Flax `__call__` too, but the harness's Flax call fills
    torch's zeros, so they are passed on both sides."""
    lengths = _question_lengths(config)

    def make(ids):
        return (np.arange(ids.shape[-1])[None, :] >= lengths(ids)).astype(np.int32)
    make.from_ids = True  # type: ignore[attr-defined]
    return make


def _ones_like_main(make_main: Callable, main: str) -> Callable:
    def make(rng, batch_size, dtype):
        shape = make_main(np.random.default_rng(0), batch_size, np.float32).shape
        # whisper's features are (B, mels, frames): its mask runs over frames; ids (B, [choices,] length) alike
        return np.ones((batch_size, shape[-1]) if main == "input_features" else shape, dtype=np.int32)
    return make


def _vocab(config: Any) -> int:
    vocab = getattr(config, "vocab_size", None) or getattr(_sub_config(config, "decoder", "text_config"),
                                                           "vocab_size", None)
    if not isinstance(vocab, int) or vocab < 1:
        raise ComparisonError(f"hf.pair: the config's vocab_size={vocab!r}; pass make_inputs=token_inputs(vocab=...)")
    return vocab


def _positions(config: Any) -> int:
    for name in ("max_position_embeddings", "n_positions", "max_target_positions"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return TOKEN_LENGTH


def _image_size(config: Any) -> int:
    size = getattr(config, "image_size", None)
    return size if isinstance(size, int) else 32  # convolutional nets (ResNet, RegNet) take any size


def _audio_samples(config: Any) -> int:
    """The shortest raw-audio length whose feature extractor yields AUDIO_FRAMES frames."""
    frames = AUDIO_FRAMES
    for kernel, stride in reversed(list(zip(config.conv_kernel, config.conv_stride, strict=True))):
        frames = (frames - 1) * stride + kernel
    return frames


def _decoder_config(config: Any) -> Any:
    return getattr(config, "decoder", None) or config


def _sub_config(config: Any, *names: str) -> Any:
    return next((getattr(config, n) for n in names if getattr(config, n, None) is not None), config)


def derived_inputs(torch_model: Any, labels: Callable | None) -> MakeInputs:
    """make_inputs from the model (see the module docstring); targets from `labels(rng, batch_size)`."""
    makers, order = model_inputs(torch_model)

    def make(batch_size: int, seed: int, dtype: Any) -> tuple:
        rng = np.random.default_rng(seed)
        made: dict[str, Any] = {}
        for name in order:
            maker = makers[name]
            from_ids = getattr(maker, "from_ids", False)
            made[name] = maker(made["input_ids"]) if from_ids else maker(rng, batch_size, dtype)
        inputs = tuple(made[name] for name in order)
        targets = labels(rng, batch_size) if labels is not None else np.zeros((batch_size,), np.int32)
        return inputs, targets
    make.input_names = tuple(order)  # type: ignore[attr-defined]
    return make
