"""A row with no value on one side (a call one framework never made) is never a divergence: it is noted.

The issue's cases: torch `fc(x) + fc(x)` beside Flax `y = fc(x); y + y` named a first divergence "between fc
and fc" in an honest, passing twin, and sent the user after an activation that is not there.
"""
from __future__ import annotations

import flax.linen as nn
import numpy as np
import torch
from _twins import mse_jax, mse_torch, regression
from hypothesis import given, settings
from hypothesis import strategies as st

from comparisons import compare
from comparisons.layers import Row, Side, first_divergence
from comparisons.models import pair_from_modules

AGREE = Side(0.0, 0.0, "agree")
MISSING = Side(None, None, "missing", message="no Flax call")


def differs(figure: float) -> Side:
    return Side(figure, figure, "differs", "port")


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), rows=st.integers(1, 8), parted=st.booleans())
def test_missing_rows_never_start_a_divergence_and_the_rows_with_values_still_do(seed, rows, parted):
    rng = np.random.default_rng(seed)
    layers = [Row(f"layer{i}", f"layer{i}", "linear", 0, AGREE, AGREE) for i in range(rows)]
    for i in rng.choice(rows, size=int(rng.integers(1, rows + 1)), replace=False):
        layers[i] = Row(layers[i].torch, layers[i].flax, "linear", 1, MISSING, MISSING)
    with_values = [i for i, row in enumerate(layers) if row.has_values]
    if not parted or not with_values:
        assert first_divergence(layers, AGREE, (), ()) is None
        return
    at = int(rng.choice(with_values))
    layers[at] = Row(layers[at].torch, layers[at].flax, "linear", 0, AGREE, differs(1e-3))
    found = first_divergence(layers, AGREE, (), ())
    before = [layers[i].torch for i in with_values if i < at]
    previous = before[-1] if before else None
    assert (found["where"], found["torch"], found["previous"]) == ("inside", f"layer{at}", previous)


class TorchTwice(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.out = torch.nn.Linear(6, 6), torch.nn.Linear(6, 3)

    def forward(self, x):
        return self.out(self.fc(x) + self.fc(x))


class FlaxOnce(nn.Module):
    scale: float = 1.0  # 1.0: honest; else the second term is scaled: a real difference after fc

    @nn.compact
    def __call__(self, x, train: bool = False):
        y = nn.Dense(6, name="fc")(x)
        return nn.Dense(3, name="out")(y + self.scale * y)


def test_a_result_computed_once_and_reused_passes_with_a_note_and_no_divergence():
    seed = int(np.random.default_rng().integers(1000))
    reports = {}
    for scale in (1.0, 1.5):
        torch.manual_seed(seed)
        pair = pair_from_modules(f"twice_{scale}", TorchTwice(), FlaxOnce(scale), make_inputs=regression(),
                                 loss_torch=mse_torch, loss_jax=mse_jax)
        reports[scale] = compare(pair, batch_size=5, devices=2, strategies=["explicit"], steps=1,
                                 torch_devices="cpu", seed=seed, layers=True)
    honest, buggy = reports[1.0], reports[1.5]
    assert honest.ok and honest.first_divergence is None, honest.first_divergence
    rows = [(row["torch"], row["call"], row["output"]["verdict"]) for row in honest.layer_view]
    assert rows[1] == ("fc", 1, "missing"), rows
    assert any("no value on one side for fc (call 1)" in note for note in honest.notes), honest.notes
    found = buggy.first_divergence
    assert not buggy.ok and (found["where"], found["torch"], found["previous"]) == ("between", "out", "fc"), found


class TorchTwoLayers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc, self.out = torch.nn.Linear(6, 6), torch.nn.Linear(6, 3)

    def forward(self, x):
        return self.out(torch.tanh(self.fc(x)))


class FlaxRemat(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool = False):
        return nn.Dense(3, name="out")(nn.tanh(nn.remat(nn.Dense)(6, name="fc")(x)))


def test_a_layer_under_remat_names_no_divergence_in_an_honest_twin():
    seed = int(np.random.default_rng().integers(1000))
    torch.manual_seed(seed)
    pair = pair_from_modules("remat", TorchTwoLayers(), FlaxRemat(), make_inputs=regression(),
                             loss_torch=mse_torch, loss_jax=mse_jax)
    report = compare(pair, batch_size=5, devices=2, strategies=["explicit"], steps=1, torch_devices="cpu",
                     seed=seed, layers=True)
    assert report.ok and report.first_divergence is None, (report.first_divergence, report.layer_view)
