"""The doctor on a held-out set: every hazard reported with its kind, no sound model reported at all.

Each label is checked against stock nn.DataParallel on the same virtual devices first: a hazard
fails there or leaves the original model wrong (in the way the test names), and a sound model
gives chunk by chunk what a copy of it gives on the CPU. Then the doctor must agree.
"""
from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import _doctor_models_heldout as models
import pytest
import torch
from torch import nn

from comparisons.doctor import doctor_torch
from dp_torch import virtual

MODELS_FILE = Path(models.__file__)
DEVICES = 4


def marked(kind: str) -> str:
    """'_doctor_models_heldout.py:N' for the one line marked `# doctor: <kind>`."""
    [number] = [n for n, text in enumerate(MODELS_FILE.read_text().splitlines(), 1)
                if text.rstrip().endswith(f"# doctor: {kind}")]
    return f"{MODELS_FILE.name}:{number}"


def short(where: str) -> str:
    """A line's `where` without its folder (it is relative to the working directory)."""
    return Path(where).name if ".py:" in where else where


def features(seed: int, rows: int = 8) -> torch.Tensor:
    return torch.randn(rows, 4, generator=torch.Generator().manual_seed(seed))


def images(seed: int, rows: int = 8) -> torch.Tensor:
    return torch.randn(rows, 3, 5, 5, generator=torch.Generator().manual_seed(seed))


def stock(model: nn.Module) -> nn.DataParallel:
    """Stock DataParallel over vdev:0..3, with the model moved to vdev:0 in place (as `.to` does)."""
    return nn.DataParallel(model.to("vdev:0"), device_ids=list(range(DEVICES)))


def stock_fails(model: nn.Module, x: torch.Tensor) -> None:
    """Stock DataParallel raises from a replica within two steps (a cache breaks the step after it fills)."""
    dp = stock(model)
    with virtual.stock_comm(), pytest.raises(RuntimeError, match="Caught RuntimeError in replica"):
        for _ in range(2):
            dp(x)


def stock_step(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    with virtual.stock_comm():
        return stock(model)(x)


def chunk_zero(x: torch.Tensor) -> torch.Tensor:
    return x[: -(-x.shape[0] // DEVICES)]


# What stock DataParallel gets wrong, for the hazards that do not raise.
def memory_holds_every_replicas_keys(model, x):
    stock_step(model, x)
    keys = model.attn.memory["keys"]
    assert len(keys) == DEVICES and {k.device for k in keys} == set(virtual.devices()[:DEVICES])


def head_never_reaches_the_original(model, x):
    stock_step(model, x)
    assert model.head is None


def average_comes_from_chunk_0_only(model, x):
    cpu = copy.deepcopy(model)
    stock_step(model, x)
    expected = 0.1 * cpu.fc(chunk_zero(x)).mean(0).detach()
    assert torch.allclose(virtual.cpu_view(model.average), expected, atol=1e-6)
    assert not torch.allclose(expected, 0.1 * cpu.fc(x).mean(0).detach(), atol=1e-3)


def rebound_buffer_never_reaches_the_original(model, x):
    stock_step(model, x)
    assert not virtual.cpu_view(model.ema).any()  # still the zeros of __init__: every replica's value lost


def parametrization_counts_1_of_4_runs(model, x):
    runs, calls = models.CountingParametrization.runs, model.fc.parametrizations.weight[0].calls.item()
    stock_step(model, x)
    assert models.CountingParametrization.runs - runs == DEVICES  # one per replica
    assert virtual.cpu_view(model.fc.parametrizations.weight[0].calls).item() - calls == 1  # replica 0's


def peak_comes_from_chunk_0_only(model, x):
    cpu = copy.deepcopy(model)
    x = x.clone()
    x[-1] *= 100.0  # the batch's largest features are in the last chunk
    stock_step(model, x)
    chunk0 = cpu.fc(chunk_zero(x)).detach().abs().amax(0)
    assert torch.allclose(virtual.cpu_view(model.norm.peak), chunk0)
    assert (cpu.fc(x).detach().abs().amax(0) > chunk0).all()


def features_never_reach_the_original(model, x):
    stock_step(model, x)
    assert not hasattr(model, "features")


@dataclass(frozen=True)
class Hazard:
    model: Callable[[], nn.Module]
    findings: list[tuple[str, str]]   # (kind, where), in the report's order
    stock: Callable[[nn.Module, torch.Tensor], None] = stock_fails


HAZARDS = [
    Hazard(models.PositionCache, [("shared-cache", "tables")]),
    Hazard(models.WithMemory, [("shared-cache", "attn.memory")], memory_holds_every_replicas_keys),
    Hazard(models.TupleOfStatistics, [("unreplicated-tensor", "stats[0]"), ("unreplicated-tensor", "stats[1]")]),
    Hazard(models.DictOfTables, [("unreplicated-tensor", "tables['scale']")]),
    Hazard(models.HeadsInDict, [("unreplicated-module", "heads['cls']")]),
    Hazard(models.LazyHead, [("state-on-self", "head")], head_never_reaches_the_original),
    Hazard(models.ExponentialAverage, [("lost-inplace-update", "average")], average_comes_from_chunk_0_only),
    Hazard(models.RebindsBuffer, [("state-on-self", "ema")], rebound_buffer_never_reaches_the_original),
    Hazard(models.CountingParametrized, [("lost-inplace-update", "fc.parametrizations.weight.0.calls")],
           parametrization_counts_1_of_4_runs),
    Hazard(models.GlobalMask, [("cross-device-op", marked("cross-device-op"))]),
    Hazard(models.NoiseOnTheCpu, [("fixed-device-creation", marked("fixed-device-creation"))]),
    Hazard(models.LayerMadeInForward, [("fixed-device-creation", marked("fixed-device-creation (layer)"))]),
    Hazard(models.WithOwnStatistic, [("lost-inplace-update", "norm.peak")], peak_comes_from_chunk_0_only),
    Hazard(models.RememberedOutput, [("state-on-self", "features")], features_never_reach_the_original),
]

SOUND = [models.ConvTimmNorm, models.WithInstanceNorm, models.CachePerDevice, models.BuffersPerEntry,
         models.SymmetricLinear, models.ListsAndDictsOfLayers, models.MadeOnTheInputsDevice,
         models.StatelessLayersInForward, models.ScalarSettings, models.TiedAndInPlace, models.ParameterContainers,
         models.ReadsRegisteredMask]


def name(case) -> str:
    return getattr(case, "model", case).__name__


def inputs_for(model: Callable[[], nn.Module], seed: int) -> torch.Tensor:
    return images(seed) if model is models.ConvTimmNorm else features(seed)


@pytest.mark.parametrize("seed", [40, 41])
@pytest.mark.parametrize("hazard", HAZARDS, ids=name)
def test_the_hazard_misbehaves_under_stock_data_parallel(hazard, seed):
    torch.manual_seed(seed)
    hazard.stock(hazard.model(), features(seed))


@pytest.mark.parametrize("seed", [40, 41])
@pytest.mark.parametrize("hazard", HAZARDS, ids=name)
def test_the_doctor_reports_the_hazard_with_its_kind(hazard, seed):
    torch.manual_seed(seed)
    report = doctor_torch(hazard.model().train(), features(seed))
    assert [(f.kind, short(f.where)) for f in report.findings] == hazard.findings, report.render()


@pytest.mark.parametrize("seed", [42, 43])
@pytest.mark.parametrize("model", SOUND, ids=name)
def test_the_sound_model_matches_its_cpu_copy_chunk_by_chunk_under_stock_data_parallel(model, seed):
    torch.manual_seed(seed)
    module, x = model().train(), inputs_for(model, seed)
    expected = torch.cat([copy.deepcopy(module)(chunk) for chunk in x.chunk(DEVICES)])
    out = stock_step(module, x)
    torch.testing.assert_close(virtual.cpu_view(out), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("seed", [42, 43])
@pytest.mark.parametrize("model", SOUND, ids=name)
def test_the_doctor_reports_nothing_for_the_sound_model(model, seed):
    torch.manual_seed(seed)
    report = doctor_torch(model().train(), inputs_for(model, seed), backward=True)
    assert report.ok and report.notes == (), report.render()


def test_the_set_is_as_large_as_the_issue_asks_and_covers_every_torch_kind_it_can():
    kinds = {kind for hazard in HAZARDS for kind, _ in hazard.findings}
    assert len(HAZARDS) >= 10 and len(SOUND) >= 10
    assert kinds == {"shared-cache", "unreplicated-tensor", "unreplicated-module", "state-on-self",
                     "lost-inplace-update", "cross-device-op", "fixed-device-creation"}
