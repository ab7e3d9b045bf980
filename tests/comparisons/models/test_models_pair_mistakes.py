"""The pair checks of docs/models.md name the function or argument, the value and the fix for each mistake that
gave a raw error from inside torch or JAX (issue 36): a list from make_inputs, a float64 or bfloat16 input in a
float32 run, bfloat16 variables, a loss that is a Python number, None for a model or a loss, a Flax model without
`train=`, active dropout on either side. compare() raises a UsageError (ComparisonError at run time); the CLI
exits 2 with the same message, never 70 ("a bug of dp-compare")."""
from __future__ import annotations

import importlib
import uuid

import numpy as np
import pytest

from comparisons import compare
from comparisons.cli import main
from comparisons.errors import UsageError
from comparisons.models import pair as pair_module

COMMON = '''
import dataclasses

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import torch
from flax import linen as nn

from comparisons.models import pair_from_modules

SEED = {seed}


class Twin(nn.Module):
    rate: float = 0.0

    @nn.compact
    def __call__(self, x, train: bool = False):
        return nn.Dense(3, name="fc")(nn.Dropout(self.rate, deterministic=not train)(x))


class NoTrain(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(3, name="fc")(x)


class Net(torch.nn.Module):
    def __init__(self, rate=0.0):
        super().__init__()
        self.drop = torch.nn.Dropout(rate)
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(self.drop(x))


def features(batch_size, seed, dtype):
    rng = np.random.default_rng(seed + SEED)
    return (rng.standard_normal((batch_size, 4)).astype(dtype),), rng.standard_normal((batch_size, 3)).astype(dtype)


def mse_torch(output, targets):
    return ((output - targets) ** 2).mean()


def mse_jax(output, targets):
    return jnp.mean((output - targets) ** 2)


def made(name, torch_net=None, flax_net=None, **changes):
    torch.manual_seed(SEED)
    good = pair_from_modules(name, torch_net or Net(), flax_net or Twin(), make_inputs=features,
                             loss_torch=mse_torch, loss_jax=mse_jax)
    return dataclasses.replace(good, **changes)  # a ModelPair as a user writes it, with the one mistake

'''
MISTAKES = {  # kind: (the pair's line in the user's module, what the message must say)
    "inputs as a list": ("made(NAME, make_inputs=lambda b, s, d: [features(b, s, d)[0][0], features(b, s, d)[1]])",
                         ["make_inputs(batch_size=", "returned inputs a numpy.ndarray", "not a non-empty tuple",
                          "((x,), y)"]),
    "three values": ("made(NAME, make_inputs=lambda b, s, d: [*features(b, s, d)[0], features(b, s, d)[1], 0])",
                     ["make_inputs(batch_size=", "returned a builtins.list", "return the pair (inputs, targets)"]),
    "float64 input": ("made(NAME, make_inputs=lambda b, s, d: ((features(b, s, d)[0][0].astype(np.float64),), "
                      "features(b, s, d)[1]))", ["inputs[0] in float64 in a float32 run", "x.astype(dtype)"]),
    "bfloat16 input": ("made(NAME, make_inputs=lambda b, s, d: ((features(b, s, d)[0][0].astype(ml_dtypes.bfloat16)"
                       ",), features(b, s, d)[1]))", ["inputs[0] in bfloat16", "x.astype(dtype)"]),
    "bfloat16 variables": ("made(NAME, variables={'params': {'fc': {'kernel': np.ones((4, 3), ml_dtypes.bfloat16), "
                           "'bias': np.zeros(3, ml_dtypes.bfloat16)}}})",
                           ["variables= holds bfloat16 leaves", "['params']['fc']['kernel']", "in float32"]),
    "float torch loss": ("made(NAME, loss_torch=lambda o, y: float(((o - y) ** 2).mean()))",
                         ["loss_torch(output, targets) returned", "(a float), not a torch tensor", ".item()"]),
    "float jax loss": ("made(NAME, loss_jax=lambda o, y: float(jnp.mean((o - y) ** 2)))",
                       ["loss_jax(output, targets) makes a traced value a Python number", "jnp.mean"]),
    "None torch model": ("pair_from_modules(NAME, None, Twin(), make_inputs=features, loss_torch=mse_torch, "
                         "loss_jax=mse_jax)", ["torch_module is None", "pass the torch model first"]),
    "None Flax model": ("made(NAME, make_flax=None)", ["make_flax=None (a NoneType) is not callable", "lambda: My"]),
    "None jax loss": ("pair_from_modules(NAME, Net(), Twin(), make_inputs=features, loss_torch=mse_torch, "
                      "loss_jax=None)", ["loss_jax=None (a NoneType) is not callable", "loss_torch= and loss_jax="]),
    "no train=": ("made(NAME, make_flax=lambda: NoTrain())",
                  ["make_flax() gives NoTrain, whose __call__ takes no train=", "`train: bool = False`"]),
    "torch dropout": ("made(NAME, make_torch=lambda: Net(0.25))",
                      ["active dropout in a training comparison: drop (Dropout p=0.25)", "set p=0"]),
    "Flax dropout": ("made(NAME, make_flax=lambda: Twin(0.25))",
                     ["the Flax model Twin draws random numbers in a training forward", "dropout rates to 0"]),
}


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """(module name, pair name) of a fresh user module holding one mistaken pair, importable, registry restored."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(pair_module, "_REGISTRY", dict(pair_module._REGISTRY))

    def write(kind: str, seed: int) -> tuple[str, str]:
        module = f"mistaken_{uuid.uuid4().hex[:8]}"
        line = MISTAKES[kind][0].replace("NAME", repr(module))
        (tmp_path / f"{module}.py").write_text(COMMON.format(seed=seed) + f"\n\ndef pair():\n    return {line}\n\n"
                                               f"PAIR = pair() if __name__ != '__main__' else None\n")
        return module, module
    return write


@pytest.mark.parametrize("kind", sorted(MISTAKES))
def test_each_mistake_is_named_by_compare_and_exits_2_from_the_cli(kind, user_module, capsys):
    seed = int(np.random.default_rng().integers(1000))
    said = MISTAKES[kind][1]
    module, _ = user_module(kind, seed)
    with pytest.raises(UsageError) as caught:
        pair = importlib.import_module(module).PAIR  # some mistakes are refused as the pair is made
        compare(pair, batch_size=4, devices=2, strategies=["explicit"], steps=1, precision="off",
                torch_devices="cpu", seed=seed)
    for text in said:
        assert text in str(caught.value), (text, str(caught.value))
    status = main(["run", "--pair", f"{module}:PAIR", "--devices", "2", "--batch", "4", "--steps", "1",
                   "--strategy", "explicit", "--precision", "off", "--torch-devices", "cpu", "--seed", str(seed)])
    err = capsys.readouterr().err
    assert status == 2, err
    assert "internal error" not in err and "Traceback" not in err
    for text in said:
        assert text in err, (text, err)


def test_the_pair_checks_forward_leaves_the_built_module_as_built():
    # The checks' probe forward once ran on the built module itself: a buffer that forward updates even in eval
    # mode (a counter) started the compared runs off by one (the traced CountingBuffer pair failed as port).
    import flax.linen as fnn
    import torch

    from comparisons.models import pair_from_modules

    class Counting(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(3, 2)
            self.register_buffer("seen", torch.zeros(()))

        def forward(self, x):
            self.seen += x.shape[0]
            return self.fc(x)

    class Twin(fnn.Module):
        @fnn.compact
        def __call__(self, x, train: bool = False):
            return fnn.Dense(2, name="fc")(x)

    rng = np.random.default_rng()
    rows = int(rng.integers(3, 9))
    pair = pair_from_modules("counting", Counting(), Twin(), make_inputs=lambda b, s, d: (
        (np.random.default_rng(s).standard_normal((b, 3)).astype(d),), np.zeros((b, 2), d)),
        loss_torch=lambda o, y: ((o - y) ** 2).mean(), loss_jax=lambda o, y: ((o - y) ** 2).mean(),
        torch_only=("seen",))
    _, built = pair.build_declared(seed=rows)
    assert float(built.torch.seen) == 0.0
