"""doctor_jax names the NNX layers whose settings are not torch's, by their path: in a function's reach, and in a
bound NNX module given as it is (doctor_jax(model, *inputs))."""
from pathlib import Path

import _doctor_models_jax as models
import jax
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from comparisons import doctor_jax
from comparisons.errors import UsageError


class Net(nnx.Module):
    def __init__(self, features: int, epsilon: float):
        self.fc = nnx.Linear(features, features, rngs=nnx.Rngs(0))
        self.norm = nnx.LayerNorm(features, epsilon=epsilon, rngs=nnx.Rngs(0))

    def __call__(self, x):
        return self.norm(self.fc(x))


@given(features=st.integers(2, 5))
@settings(max_examples=2, deadline=None)
def test_an_nnx_layernorm_with_flaxs_epsilon_is_named_at_its_path(features):
    x = np.random.default_rng(features).standard_normal((4, features)).astype(np.float32)
    planted, honest = Net(features, 1e-6), Net(features, 1e-5)
    report = doctor_jax(lambda variables, x: planted(x), {}, x, devices=jax.devices()[:2])
    found = [f for f in report.findings if f.kind == "nnx-default"]
    assert [f.where for f in found] == ["planted.norm"] and "epsilon=1e-05" in found[0].fix
    report = doctor_jax(lambda variables, x: honest(x), {}, x, devices=jax.devices()[:2])
    assert not [f for f in report.findings if f.kind == "nnx-default"]


def marked_lines(kind: str) -> set[str]:
    lines = Path(models.__file__).read_text().splitlines()
    return {f"{Path(models.__file__).name}:{n}" for n, text in enumerate(lines, 1)
            if text.rstrip().endswith(f"# doctor: {kind}")}


def nnx_inputs(features: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((8, features)).astype(np.float32), rng.integers(0, 10, 8)


@given(features=st.integers(2, 5), blocks=st.integers(1, 3))
@settings(max_examples=2, deadline=None)
def test_an_nnx_module_given_as_it_is_names_flaxs_defaults_at_each_layers_path(features, blocks):
    model = models.NNXTrapped(features, blocks, nnx.Rngs(features))
    report = doctor_jax(model, *nnx_inputs(features, blocks), devices=jax.devices()[:2])
    found: dict[str, set[str]] = {}
    for finding in report.findings:
        assert finding.kind == "nnx-default", finding
        found.setdefault(finding.where, set()).add(finding.fix)
        assert finding.source is not None and finding.source.split("/")[-1] in marked_lines("nnx-default")
    assert set(found) == {"embed", "bn", *(f"blocks[{i}].norm" for i in range(blocks))}
    assert "nnx.BatchNorm(..., momentum=0.9)" in found["bn"]
    assert all(found[f"blocks[{i}].norm"] == {"nnx.LayerNorm(..., epsilon=1e-05)"} for i in range(blocks))
    assert "dtype" in next(iter(found["embed"]))


@given(features=st.integers(2, 5), blocks=st.integers(1, 3))
@settings(max_examples=2, deadline=None)
def test_an_nnx_module_with_torchs_settings_has_no_nnx_default(features, blocks):
    model = models.NNXHonest(features, blocks, nnx.Rngs(features))
    report = doctor_jax(model, nnx_inputs(features, blocks)[0], devices=jax.devices()[:2])
    assert report.ok, report.render()


def test_what_is_not_a_bound_nnx_module_is_refused_in_one_line_naming_nnx_and_the_fix():
    model, x = Net(3, 1e-5), np.ones((4, 3), np.float32)
    graphdef, state = nnx.split(model)
    for wrong in (Net, graphdef, state):
        with pytest.raises(UsageError) as error:
            doctor_jax(wrong, {}, x, devices=jax.devices()[:2])
        message = str(error.value)
        assert "\n" not in message and "NNX" in message and "doctor_jax(model, *inputs)" in message, message
    with pytest.raises(UsageError, match=r"holds its own state.*doctor_jax\(model, \*inputs\)"):
        doctor_jax(model, {}, x, devices=jax.devices()[:2])  # the function form's variables, given a module
