"""compare() compiles light on the CPU (comparisons/runs/_light_compiles.py), and the verdicts stay the same.

Each test starts with the flag off, as in a user's process, and puts back what it found.
"""
from __future__ import annotations

import random
from types import SimpleNamespace

import jax
import pytest

import comparisons
from comparisons import compare, runs
from comparisons.errors import ComparisonError

FLAG = "jax_disable_most_optimizations"


@pytest.fixture
def full_by_default(monkeypatch):
    """The flag off, as in a user's process; restored after."""
    before = jax.config.values[FLAG]
    jax.config.update(FLAG, False)
    monkeypatch.delenv(runs.XLA_OPTIMIZE_ENV, raising=False)
    yield
    jax.config.update(FLAG, before)


def test_the_flag_is_on_inside_the_block_on_cpus_and_restored_after_even_on_an_error(full_by_default):
    cpus = jax.devices()[: random.randint(1, 8)]
    with runs.light_compiles(cpus) as light:
        assert light and jax.config.values[FLAG]
    assert not jax.config.values[FLAG]
    with pytest.raises(ZeroDivisionError), runs.light_compiles(cpus):
        raise ZeroDivisionError("inside the block")
    assert not jax.config.values[FLAG]


def test_a_gpu_full_setting_or_the_user_s_own_flag_is_left_alone(full_by_default, monkeypatch):
    gpu = SimpleNamespace(platform=random.choice(["gpu", "cuda", "rocm", "tpu"]))
    with runs.light_compiles([jax.devices()[0], gpu]) as light:
        assert not light and not jax.config.values[FLAG]
    monkeypatch.setenv(runs.XLA_OPTIMIZE_ENV, random.choice(["full", "FULL", " full "]))
    with runs.light_compiles(jax.devices()[:2]) as light:
        assert not light and not jax.config.values[FLAG]
    monkeypatch.delenv(runs.XLA_OPTIMIZE_ENV)
    jax.config.update(FLAG, True)  # the user's own: on before, on after
    with runs.light_compiles(jax.devices()[:2]) as light:
        assert light
    assert jax.config.values[FLAG]


def test_a_bad_setting_is_refused_naming_the_variable_and_the_values(full_by_default, monkeypatch):
    monkeypatch.setenv(runs.XLA_OPTIMIZE_ENV, "O3")
    with pytest.raises(ComparisonError, match=r"\$DP_COMPARE_XLA_OPTIMIZE='O3' is not one of light, full"):
        compare("mlp", batch_size=3, devices=2, strategies=["explicit"], steps=1, torch_devices="cpu")
    assert not jax.config.values[FLAG]


def test_a_comparison_compiles_light_says_so_and_restores_the_flag(full_by_default):
    report = compare("mlp", batch_size=random.choice([3, 5]), devices=2, strategies=["explicit"], steps=1,
                     torch_devices="cpu", precision="off")
    assert report.ok and runs.LIGHT_COMPILES_NOTE in report.notes
    assert not jax.config.values[FLAG]


def _verdicts(report):
    return [(c.subject, c.compared, c.passed, c.cause) for c in report.checks]


def _close_gaps(light, full):
    """Each check's largest gap the same up to float32 rounding (the machine code differs at LLVM -O0)."""
    for a, b in zip(light.checks, full.checks):
        if a.max_abs is not None and b.max_abs is not None:
            assert abs(a.max_abs - b.max_abs) <= 4 * max(a.max_abs, b.max_abs, 1e-7), (a.subject, a.compared)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["cnn_bn", "embedding_lstm", "mlp", "transformer_block"])
def test_every_built_in_pair_gets_the_same_verdicts_compiled_light_and_full(name, full_by_default, monkeypatch):
    batch, seed = random.choice([5, 7, 9]), random.randrange(100)
    reports = {}
    for setting in ("light", "full"):
        comparisons.clear_caches()
        jax.clear_caches()  # JAX's own caches would hand the other setting's programs back
        monkeypatch.setenv(runs.XLA_OPTIMIZE_ENV, setting)
        reports[setting] = compare(name, batch_size=batch, devices=4, steps=2, seed=seed, torch_devices="cpu")
    light, full = reports["light"], reports["full"]
    assert light.ok and full.ok, (light.render("table"), full.render("table"))
    assert _verdicts(light) == _verdicts(full)
    _close_gaps(light, full)
    assert runs.LIGHT_COMPILES_NOTE in light.notes and runs.LIGHT_COMPILES_NOTE not in full.notes
