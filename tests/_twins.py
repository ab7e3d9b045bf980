"""Small torch models and Flax twins, each built with pair_from_modules: planted bugs a port can have, and honest
twins that compute the same function with other rounding. `make(name, seed)` builds one as a ModelPair."""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import torch

from comparisons.models import pair_from_modules


def regression(scale: float = 1.0, features: int = 6, outputs: int = 3):
    """make_inputs: Gaussian features x `scale` and Gaussian targets, float in `dtype`."""
    def make(batch_size, seed, dtype):
        rng = np.random.default_rng(seed)
        x = (scale * rng.standard_normal((batch_size, features))).astype(dtype)
        return (x,), rng.standard_normal((batch_size, outputs)).astype(dtype)
    return make


def images(batch_size, seed, dtype):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch_size, 2, 6, 6)).astype(dtype)
    return (x,), rng.standard_normal((batch_size, 3)).astype(dtype)


def mse_torch(out, y):
    return ((out - y) ** 2).mean()


def mse_jax(out, y):
    return jnp.mean((out - y) ** 2)


# --- LayerNorm: torch's eps 1e-5; a Flax twin that kept nn.LayerNorm's default 1e-6 ----------------------------

class TorchTwoLayer(torch.nn.Module):
    """fc1 -> `between` -> fc2: the twins below differ only in what lies between."""

    hidden, middle = 8, 8  # fc1's outputs, fc2's inputs

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(6, self.hidden), torch.nn.Linear(self.middle, 3)

    def forward(self, x):
        return self.fc2(self.between(self.fc1(x)))


class TorchNorm(TorchTwoLayer):
    """fc1 -> `norm` -> tanh -> fc2, the norm layer from `make_norm`."""

    make_norm = staticmethod(lambda: torch.nn.LayerNorm(8))

    def __init__(self):
        super().__init__()
        self.norm = self.make_norm()

    def between(self, h):
        return torch.tanh(self.norm(h))


class FlaxNorm(nn.Module):
    epsilon: float = 1e-6  # Flax's default, the planted bug; 1e-5 is torch's

    @nn.compact
    def __call__(self, x, train: bool = False):
        h = nn.LayerNorm(epsilon=self.epsilon, name="norm")(nn.Dense(8, name="fc1")(x))
        return nn.Dense(3, name="fc2")(jnp.tanh(h))


# --- GELU: torch's exact erf form; jax.nn.gelu defaults to the tanh approximation -------------------------------

class TorchGelu(TorchTwoLayer):
    def between(self, h):
        return torch.nn.functional.gelu(h)


class FlaxGelu(nn.Module):
    form: str = "tanh"  # "tanh": jax.nn.gelu's default (the bug); "exact"; "by_hand": 0.5 x (1 + erf(x / sqrt 2))

    @nn.compact
    def __call__(self, x, train: bool = False):
        h = nn.Dense(8, name="fc1")(x)
        if self.form == "by_hand":
            h = 0.5 * h * (1.0 + jax.scipy.special.erf(h / jnp.sqrt(2.0).astype(h.dtype)))
        else:
            h = jax.nn.gelu(h, approximate=self.form == "tanh")
        return nn.Dense(3, name="fc2")(h)


# --- a bias that never trains: stop_gradient on it, under inputs of scale 1e5 -----------------------------------

class TorchMid(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mid, self.out = torch.nn.Linear(6, 4), torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.out(self.mid(x))


class FrozenBiasDense(nn.Module):
    features: int

    @nn.compact
    def __call__(self, x):
        kernel = self.param("kernel", nn.initializers.lecun_normal(), (x.shape[-1], self.features))
        bias = self.param("bias", nn.initializers.zeros, (self.features,))
        return x @ kernel + jax.lax.stop_gradient(bias)


class FlaxMid(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool = False):
        return nn.Dense(3, name="out")(FrozenBiasDense(4, name="mid")(x))


# --- one output column x1e5, the other sigmoid (torch) vs softplus (the bug) -------------------------------------

class TorchHead(torch.nn.Module):
    """One Linear `head`, then `after` on its output: the twins below differ only in `after`."""

    outputs = 2

    def __init__(self):
        super().__init__()
        self.head = torch.nn.Linear(6, self.outputs)

    def forward(self, x):
        return self.after(self.head(x))


class TorchColumns(TorchHead):
    def after(self, h):
        return torch.cat([1e5 * h[:, :1], torch.sigmoid(h[:, 1:])], dim=1)


class FlaxColumns(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool = False):
        h = nn.Dense(2, name="head")(x)
        return jnp.concatenate([1e5 * h[:, :1], jax.nn.softplus(h[:, 1:])], axis=1)


# --- conv padding: torch pads circularly; the twin pads with zeros ("SAME") ---------------------------------------

class TorchConv(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 4, 3, padding=1, padding_mode="circular")
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).mean(dim=(2, 3)))


class FlaxConv(nn.Module):
    padding: str = "SAME"  # the bug; "CIRCULAR" is torch's padding_mode="circular"

    @nn.compact
    def __call__(self, x, train: bool = False):
        h = nn.Conv(4, (3, 3), padding=self.padding, name="conv")(jnp.transpose(x, (0, 2, 3, 1)))
        return nn.Dense(3, name="fc")(jnp.mean(jax.nn.relu(h), axis=(1, 2)))


# --- BatchNorm momentum: torch 0.1 is Flax 0.9; a twin that kept Flax's 0.99 --------------------------------------

class TorchBN(TorchNorm):
    make_norm = staticmethod(lambda: torch.nn.BatchNorm1d(8))


class FlaxBN(nn.Module):
    momentum: float = 0.99

    @nn.compact
    def __call__(self, x, train: bool = False):
        from comparisons.models.flax_nets import TorchBatchNorm

        h = TorchBatchNorm(momentum=self.momentum, name="norm")(nn.Dense(8, name="fc1")(x), train)
        return nn.Dense(3, name="fc2")(jnp.tanh(h))


# --- a reordered sum: torch sums the hidden units in order, the twin backwards, by cumulative sum ----------------

class TorchSum(TorchTwoLayer):
    hidden, middle = 16, 1

    def between(self, h):
        return torch.tanh(h).sum(dim=1, keepdim=True)


class FlaxSum(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool = False):
        h = jnp.tanh(nn.Dense(16, name="fc1")(x))
        return nn.Dense(3, name="fc2")(jnp.cumsum(h[:, ::-1], axis=1)[:, -1:])


# --- an output the loss does not read: torch's probabilities are a softmax, the twin's a sigmoid ------------------

class TorchHeads(TorchHead):
    outputs = 3

    def after(self, logits):
        return {"logits": logits, "probs": torch.softmax(logits, dim=-1)}


class FlaxHeads(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool = False):
        logits = nn.Dense(3, name="head")(x)
        return {"logits": logits, "probs": jax.nn.sigmoid(logits)}


def logits_mse_torch(out, y):
    return mse_torch(out["logits"], y)


def logits_mse_jax(out, y):
    return mse_jax(out["logits"], y)


# --- one layer called twice (shared weights): tanh between the calls in torch, relu in the buggy twin --------------

class TorchShared(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.out = torch.nn.Linear(6, 6), torch.nn.Linear(6, 3)

    def forward(self, x):
        return self.out(torch.tanh(self.fc(torch.tanh(self.fc(x)))))


class FlaxShared(nn.Module):
    between: str = "relu"  # the bug; "tanh" is torch's

    @nn.compact
    def __call__(self, x, train: bool = False):
        fc = nn.Dense(6, name="fc")
        act = getattr(jax.nn, self.between) if self.between != "tanh" else jnp.tanh
        return nn.Dense(3, name="out")(jnp.tanh(fc(act(fc(x)))))


# --- a replica that keeps state across calls: each call scales by how many calls came before ---------------------

class TorchCounting(TorchTwoLayer):
    """`calls` lives in the module's __dict__, which dp_torch.replicate's shallow copies share: every replica
    appends to one list, so replica i scales by a count the single-device run on its chunk never sees."""

    def __init__(self):
        super().__init__()
        self.calls: list = []

    def between(self, h):
        self.calls.append(None)
        return h * len(self.calls)


class FlaxCounting(nn.Module):
    """The Flax half computes what torch's single-device call computes (one call: x 1)."""

    @nn.compact
    def __call__(self, x, train: bool = False):
        return nn.Dense(3, name="fc2")(nn.Dense(8, name="fc1")(x))


TWINS = {  # name -> (torch class, Flax module, make_inputs)
    "layernorm_epsilon": (TorchNorm, FlaxNorm(), regression(3.0)),
    "gelu_tanh": (TorchGelu, FlaxGelu("tanh"), regression()),
    "stop_gradient_bias": (TorchMid, FlaxMid(), regression(1e5)),
    "hidden_column": (TorchColumns, FlaxColumns(), regression(outputs=2)),
    "conv_padding": (TorchConv, FlaxConv(), images),
    "batchnorm_momentum": (TorchBN, FlaxBN(), regression()),
    "post_processing": (TorchHeads, FlaxHeads(), regression()),
    "shared_layer_relu": (TorchShared, FlaxShared(), regression()),
    "counting_calls": (TorchCounting, FlaxCounting(), regression()),
    # honest twins
    "layernorm_same_epsilon": (TorchNorm, FlaxNorm(1e-5), regression(3.0)),
    "gelu_exact": (TorchGelu, FlaxGelu("exact"), regression()),
    "gelu_by_hand": (TorchGelu, FlaxGelu("by_hand"), regression()),
    "reordered_sum": (TorchSum, FlaxSum(), regression()),
    "conv_circular": (TorchConv, FlaxConv("CIRCULAR"), images),
    "batchnorm_same_momentum": (TorchBN, FlaxBN(0.9), regression()),
    "shared_layer": (TorchShared, FlaxShared("tanh"), regression()),
}


def make(name: str, seed: int = 0):
    """The twin `name` as a ModelPair, the torch weights drawn from `seed`."""
    torch_class, flax_module, make_inputs = TWINS[name]
    torch.manual_seed(seed)
    dict_output = torch_class is TorchHeads
    return pair_from_modules(name, torch_class(), flax_module, make_inputs=make_inputs,
                             loss_torch=logits_mse_torch if dict_output else mse_torch,
                             loss_jax=logits_mse_jax if dict_output else mse_jax)


# For `python -m comparisons run --pair _twins:LAYERNORM_EPSILON`.
LAYERNORM_EPSILON = make("layernorm_epsilon")
GELU_BY_HAND = make("gelu_by_hand")
