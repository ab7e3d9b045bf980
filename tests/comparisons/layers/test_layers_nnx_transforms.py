"""The layer view of an NNX twin that runs layers inside a JAX transform: a user's own `nnx.scan` over a step
layer, and an `nnx.RNN` (itself an nnx.scan over its cell). nnx.capture's sown values would change the scan's
carried state (jax.lax.scan refused it with a TypeError, seen failing); the report is made, the layers called
outside the transform have their rows with values, and the step layer's rows read "missing" naming the transform.
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import torch
from flax import nnx

from comparisons import compare
from comparisons.models import pair_from_modules

HIDDEN = 6


class TorchRecurrent(torch.nn.Module):
    """A projection, a hand-written recurrence over time (one Linear per step), an LSTM, a head."""

    def __init__(self):
        super().__init__()
        self.inp, self.step = torch.nn.Linear(4, HIDDEN), torch.nn.Linear(HIDDEN, HIDDEN)
        self.lstm = torch.nn.LSTM(HIDDEN, HIDDEN, batch_first=True)
        self.head = torch.nn.Linear(HIDDEN, 3)

    def forward(self, x):
        projected, state, states = self.inp(x), torch.zeros(x.shape[0], HIDDEN), []
        for t in range(x.shape[1]):
            state = torch.tanh(self.step(state) + projected[:, t])
            states.append(state)
        return self.head(self.lstm(torch.stack(states, 1))[0][:, -1])


def _step(step: nnx.Linear, state: jnp.ndarray, projected: jnp.ndarray):
    state = jnp.tanh(step(state) + projected)
    return state, state


class NNXRecurrent(nnx.Module):
    def __init__(self, *, rngs: nnx.Rngs):
        self.inp, self.step = nnx.Linear(4, HIDDEN, rngs=rngs), nnx.Linear(HIDDEN, HIDDEN, rngs=rngs)
        self.lstm = nnx.RNN(nnx.OptimizedLSTMCell(HIDDEN, HIDDEN, rngs=rngs))
        self.head = nnx.Linear(HIDDEN, 3, rngs=rngs)

    def __call__(self, x):
        projected = self.inp(x)
        scan = nnx.scan(_step, in_axes=(None, nnx.Carry, 1), out_axes=(nnx.Carry, 1))
        _, states = scan(self.step, jnp.zeros((x.shape[0], HIDDEN), x.dtype), projected)
        return self.head(self.lstm(states)[:, -1])


def _inputs(batch_size, seed, dtype):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((batch_size, 5, 4)).astype(dtype),), rng.integers(0, 3, batch_size).astype(np.int32)


def _ce_torch(logits, labels):
    return torch.nn.functional.cross_entropy(logits, torch.as_tensor(labels).long())


def _ce_jax(logits, labels):
    import optax
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


def test_a_user_scan_and_an_nnx_rnn_give_a_layer_view_with_the_layers_outside_the_transform():
    seed = int(np.random.default_rng().integers(0, 1000))
    torch.manual_seed(seed)
    pair = pair_from_modules("recurrent_nnx", TorchRecurrent(), NNXRecurrent(rngs=nnx.Rngs(seed)),
                             make_inputs=_inputs, loss_torch=_ce_torch, loss_jax=_ce_jax)
    report = compare(pair, batch_size=4, devices=2, seed=seed, strategies=["explicit"], steps=1, layers=True,
                     torch_devices="cpu")
    assert report.ok, report.render("markdown")
    rows = {(row["torch"], row["call"]): row for row in report.layer_view}
    for outside in ("inp", "lstm", "head"):  # the LSTM's row: nnx.RNN's whole output beside nn.LSTM's
        assert rows[(outside, 0)]["output"]["verdict"] in ("agree", "rounding"), rows[(outside, 0)]
    steps = [row for row in report.layer_view if row["torch"] == "step"]
    assert len(steps) == 5 and all(row["output"]["verdict"] == "missing" for row in steps)
    assert "nnx.scan" in steps[0]["output"]["message"]
    assert report.first_divergence is None
