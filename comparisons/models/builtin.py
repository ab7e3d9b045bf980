"""The built-in pairs, each in both Flax APIs. Torch and Flax are imported only when a pair's model is made.

The registry holds the linen twin of each built-in pair (what `models.get` and the multi-process workers load);
`in_flax_api` gives a comparison the twin its `flax` setting asks for: the NNX one unless told "linen".
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np

from comparisons.errors import ComparisonError

from ..convert import Layer, channels_last_inputs
from .jax_flax_apply import FLAX_APPLY
from .jax_linen import LINEN
from .jax_nnx import NNX
from .pair import ModelPair, register

FLAX_APIS = ("nnx", "linen")  # the values of the `flax` setting; the first is a built-in pair's default


def _gaussian(shape: tuple[int, ...], seed: int, dtype: Any) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _labels(batch_size: int, classes: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed + 1).integers(0, classes, batch_size).astype(np.int32)


def _features(batch_size: int, seed: int, dtype: Any):
    return (_gaussian((batch_size, 12), seed, dtype),), _labels(batch_size, 5, seed)


def _images(batch_size: int, seed: int, dtype: Any):
    return (_gaussian((batch_size, 3, 8, 8), seed, dtype),), _labels(batch_size, 5, seed)


def _sequences(batch_size: int, seed: int, dtype: Any):
    return (_gaussian((batch_size, 6, 16), seed, dtype),), _gaussian((batch_size, 6, 16), seed + 1, dtype)


def _tokens(batch_size: int, seed: int, dtype: Any):
    tokens = np.random.default_rng(seed).integers(0, 20, (batch_size, 7)).astype(np.int32)
    return (tokens,), _labels(batch_size, 5, seed)


def cross_entropy_torch(logits, labels):
    """Mean cross-entropy over the batch (torch)."""
    import torch
    return torch.nn.functional.cross_entropy(logits, torch.as_tensor(labels).long())


def cross_entropy_jax(logits, labels):
    """Mean cross-entropy over the batch (JAX), as torch's."""
    import optax
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def mse_torch(output, target):
    """Mean squared error (torch)."""
    import torch
    return torch.nn.functional.mse_loss(output, torch.as_tensor(target))


def mse_jax(output, target):
    """Mean squared error (JAX)."""
    import jax.numpy as jnp
    return jnp.mean(jnp.square(output - target))


def _torch_net(name: str, **kwargs):
    def make():
        from . import torch_nets
        return getattr(torch_nets, name)(**kwargs)
    return make


def _flax_net(name: str, **kwargs):
    def make():
        from . import flax_nets
        return getattr(flax_nets, name)(**kwargs)
    return make


def _nnx_net(name: str):
    """A maker of the NNX twin `nnx_nets.<name>`, made once per process: the harness keys its compiled programs by
    the module object (`jax_nnx.nnx_apply`), so every comparison of the pair reuses them, as a linen twin's (hashed
    by value) does; the harness never changes the module, it merges copies. Made from its abstract shapes with
    host zeros: every weight is replaced by torch's, and running NNX's initialisers eagerly would compile a
    program per initialiser and shape (17 more for cnn_bn than its linen twin's `eval_shape`)."""
    @functools.cache
    def make():
        import jax
        from flax import nnx

        from . import nnx_nets
        graphdef, shapes = nnx.split(nnx.eval_shape(lambda: getattr(nnx_nets, name)(rngs=nnx.Rngs(0))))
        return nnx.merge(graphdef, jax.tree.map(_host_zeros, shapes))
    return make


def _host_zeros(leaf: Any) -> Any:
    """Zeros of an abstract leaf's shape and dtype, made on the host (no program): an RNG key (nnx.RNN keeps one
    for its carry's initialiser, which is zeros) wraps zero key data."""
    import jax

    if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
        return jax.random.wrap_key_data(np.zeros(jax.eval_shape(jax.random.key_data, leaf).shape, np.uint32))
    return np.zeros(leaf.shape, leaf.dtype)


MLP = ModelPair(
    name="mlp",
    make_torch=_torch_net("MLP"), make_flax=_flax_net("MLP"),
    mapping=(Layer("linear", "fc1", "fc1"), Layer("linear", "fc2", "fc2"), Layer("linear", "out", "out")),
    make_inputs=_features,
    loss_torch=cross_entropy_torch, loss_jax=cross_entropy_jax,
    description="Linear-tanh-Linear-tanh-Linear classifier on (B, 12)",
)

CNN_BN = ModelPair(
    name="cnn_bn",
    make_torch=_torch_net("CNNBN"), make_flax=_flax_net("CNNBN"),
    mapping=(Layer("conv", "conv1", "conv1"), Layer("batchnorm", "bn1", "bn1"),
             Layer("conv", "conv2", "conv2"), Layer("batchnorm", "bn2", "bn2"),
             Layer("linear", "fc", "fc")),
    make_inputs=_images,
    to_flax_inputs=channels_last_inputs,
    loss_torch=cross_entropy_torch, loss_jax=cross_entropy_jax,
    has_batch_stats=True,
    description="Conv2d-BatchNorm2d-ReLU x2 with max-pool, global average pool, Linear; NCHW/NHWC",
)

TRANSFORMER_BLOCK = ModelPair(
    name="transformer_block",
    make_torch=_torch_net("TransformerBlock"), make_flax=_flax_net("TransformerBlock"),
    mapping=(Layer("layernorm", "ln1", "ln1"), Layer("mha", "attn", "attn", num_heads=4),
             Layer("layernorm", "ln2", "ln2"), Layer("linear", "fc1", "fc1"),
             Layer("linear", "fc2", "fc2")),
    make_inputs=_sequences,
    loss_torch=mse_torch, loss_jax=mse_jax,
    description="pre-LN transformer block (4 heads, E=16, T=6) regressing (B, 6, 16)",
)

EMBEDDING_LSTM = ModelPair(
    name="embedding_lstm",
    make_torch=_torch_net("EmbeddingLSTM"), make_flax=_flax_net("EmbeddingLSTM"),
    mapping=(Layer("embedding", "embed", "embed"), Layer("lstm", "lstm", "lstm/cell"),
             Layer("linear", "out", "out")),
    make_inputs=_tokens,
    loss_torch=cross_entropy_torch, loss_jax=cross_entropy_jax,
    description="Embedding(20, 8) - LSTM(16) - Linear on the last step, tokens (B, 7)",
)

BUILTIN = (MLP, CNN_BN, TRANSFORMER_BLOCK, EMBEDDING_LSTM)

# The NNX twins: the same inputs and losses, the JAX side an `nnx.Module`, the same mapping (nnx_nets names its
# layers as torch_nets does, and NNX's layers hold linen's leaves) but for the LSTM: nnx.OptimizedLSTMCell fuses
# its gates in `dense_i`/`dense_h` as torch packs them, where linen's OptimizedLSTMCell keeps one kernel per gate.
_NNX_NETS = {"mlp": "MLP", "cnn_bn": "CNNBN", "transformer_block": "TransformerBlock",
             "embedding_lstm": "EmbeddingLSTM"}
_NNX_MAPPINGS = {"embedding_lstm": (Layer("embedding", "embed", "embed"), Layer("lstm_fused", "lstm", "lstm/cell"),
                                    Layer("linear", "out", "out"))}
BUILTIN_NNX = tuple(dataclasses.replace(pair, make_flax=_nnx_net(_NNX_NETS[pair.name]), jax_side=NNX,
                                        mapping=_NNX_MAPPINGS.get(pair.name, pair.mapping))
                    for pair in BUILTIN)
_TWINS = {linen.name: {"nnx": nnx, "linen": linen} for linen, nnx in zip(BUILTIN, BUILTIN_NNX, strict=True)}


def _twins(pair: ModelPair) -> dict[str, ModelPair] | None:
    """{API: twin} when `pair` is one of the built-in pairs' objects (a pair registered over one is not)."""
    twins = _TWINS.get(pair.name)
    return twins if twins is not None and any(pair is twin for twin in twins.values()) else None


def flax_api(pair: ModelPair) -> str | None:
    """The Flax API of `pair`'s JAX side: "nnx", "linen" (a linen Module or a FlaxApply, as Hugging Face's Flax
    models are), or None when it has no Flax model (a torchax-traced pair)."""
    return "nnx" if pair.jax_side is NNX else "linen" if pair.jax_side in (LINEN, FLAX_APPLY) else None


def flax_apis(pair: ModelPair) -> tuple[str, ...]:
    """Every Flax API `pair` can run in: both for a built-in pair, else its own (none for a traced pair)."""
    if _twins(pair) is not None:
        return FLAX_APIS
    api = flax_api(pair)
    return () if api is None else (api,)


def in_flax_api(pair: ModelPair, flax: str | None, *, flag: str = "flax", caller: str = "compare") -> ModelPair:
    """`pair` in the Flax API `flax` asks for: a built-in pair's twin in that API (None: NNX, what new code is
    written in); any other pair itself, when `flax` is None or its own API. Otherwise a ComparisonError names
    `flag` (compare's keyword, or the CLI's "--flax"), the value, the pair's API and the fix."""
    twins = _twins(pair)
    if twins is not None:
        return twins[flax or FLAX_APIS[0]]
    own = flax_api(pair)
    if flax is None or flax == own:
        return pair
    def spelled(value: str) -> str:
        return f"{flag} {value}" if flag.startswith("--") else f"{flag}={value!r}"
    fix = f"pass {spelled(own)} or drop {flag}" if own else f"drop {flag}"
    kind = {"nnx": "its JAX side is a Flax NNX module", "linen": "its JAX side is a Flax linen model"}.get(
        own, f"it has no Flax model (its JAX side: {pair.jax_side!r})")
    raise ComparisonError(f"{caller}: {spelled(flax)} does not apply to pair {pair.name!r}: {kind}, and only "
                          f"the built-in pairs come in both Flax APIs; {fix}")

for _pair in BUILTIN:  # the registry starts with them (`import comparisons.models` imports this module)
    register(_pair)
