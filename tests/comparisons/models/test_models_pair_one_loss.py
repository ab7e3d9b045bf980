"""A pair given one loss without its twin is refused where it is made, in one line naming both arguments and the
fix (issue 36): `pair_from_modules`, `ModelPair(...)` and the CLI's `run --pair mod:PAIR` (exit 2), in either
order. Before, Python's own "missing 1 required keyword-only argument" TypeError came out of the user's line."""
from __future__ import annotations

import os
import subprocess
import sys
import uuid

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from _helpers_harness import ROOT
from flax import linen as nn
from hypothesis import given, settings
from hypothesis import strategies as st

from comparisons.errors import UsageError
from comparisons.models import ModelPair, pair_from_modules

OTHER = {"loss_torch": "loss_jax", "loss_jax": "loss_torch"}


class Twin(nn.Module):
    width: int

    @nn.compact
    def __call__(self, x, train: bool = False):
        return nn.Dense(self.width, name="fc")(x)


def mse_torch(output, targets):
    return ((output - targets) ** 2).mean()


def mse_jax(output, targets):
    return jnp.mean((output - targets) ** 2)


LOSSES = {"loss_torch": mse_torch, "loss_jax": mse_jax}


def features(batch_size, seed, dtype):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((batch_size, 4)).astype(dtype),), rng.standard_normal((batch_size, 3)).astype(dtype)


def said_both(message: str, given_alone: str) -> None:
    missing = OTHER[given_alone]
    assert f"{given_alone}= without {missing}=" in message, message
    assert f"pass {missing}=" in message, message
    assert len(message.splitlines()) == 1, message


@settings(max_examples=6, deadline=None)
@given(alone=st.sampled_from(sorted(OTHER)), width=st.integers(1, 5), name=st.text("abcxyz_", min_size=1, max_size=8))
def test_pair_from_modules_refuses_one_loss_alone_naming_both(alone, width, name):
    with pytest.raises(UsageError) as caught:
        pair_from_modules(name, torch.nn.Linear(4, width), Twin(width), make_inputs=features,
                          **{alone: LOSSES[alone]})
    said_both(str(caught.value), alone)
    assert f"pair_from_modules {name!r}" in str(caught.value)


@settings(max_examples=6, deadline=None)
@given(alone=st.sampled_from(sorted(OTHER)), name=st.text("abcxyz_", min_size=1, max_size=8))
def test_model_pair_refuses_one_loss_alone_naming_both(alone, name):
    with pytest.raises(UsageError) as caught:
        ModelPair(name, lambda: torch.nn.Linear(4, 3), lambda: Twin(3), (), features, **{alone: LOSSES[alone]})
    said_both(str(caught.value), alone)
    assert f"ModelPair {name!r}" in str(caught.value)


def test_neither_loss_is_refused_naming_both():
    with pytest.raises(UsageError, match="pass loss_torch= and loss_jax="):
        pair_from_modules("none", torch.nn.Linear(4, 3), Twin(3), make_inputs=features)
    with pytest.raises(UsageError, match="pass loss_torch= and loss_jax="):
        ModelPair("none", lambda: torch.nn.Linear(4, 3), lambda: Twin(3), (), features)


@pytest.mark.parametrize("alone", sorted(OTHER))
def test_the_cli_exits_2_with_the_line_for_a_pair_with_one_loss(alone, tmp_path):
    module = f"one_loss_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(
        "import jax.numpy as jnp\nimport numpy as np\nimport torch\nfrom flax import linen as nn\n\n"
        "from comparisons.models import pair_from_modules\n\n\n"
        "class Twin(nn.Module):\n    @nn.compact\n    def __call__(self, x, train: bool = False):\n"
        "        return nn.Dense(3, name='fc')(x)\n\n\n"
        "def features(batch_size, seed, dtype):\n    rng = np.random.default_rng(seed)\n"
        "    return (rng.standard_normal((batch_size, 4)).astype(dtype),), "
        "rng.standard_normal((batch_size, 3)).astype(dtype)\n\n\n"
        "def mse_torch(output, targets):\n    return ((output - targets) ** 2).mean()\n\n\n"
        "def mse_jax(output, targets):\n    return jnp.mean((output - targets) ** 2)\n\n\n"
        f"PAIR = pair_from_modules({module!r}, torch.nn.Linear(4, 3), Twin(), make_inputs=features, "
        f"{alone}={LOSSES[alone].__name__})\n")
    environment = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    environment["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT)])
    result = subprocess.run([sys.executable, "-m", "comparisons", "run", "--pair", f"{module}:PAIR", "--devices", "2",
                             "--batch", "4", "--steps", "1", "--strategy", "explicit", "--torch-devices", "cpu"],
                            cwd=ROOT, env=environment, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and "TypeError" not in result.stderr, result.stderr
    said_both(result.stderr.strip().splitlines()[-1], alone)
    assert f"{module}.py, line " in result.stderr, result.stderr  # the user's line, not ours
