"""doctor_jax names the NNX layers its function calls whose settings are not torch's, by their path."""
import jax
import numpy as np
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from comparisons import doctor_jax


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


def test_an_nnx_module_given_as_the_apply_function_is_refused_naming_the_call_that_works():
    """Before: a 'run-error' finding from tracing model({}, x), which blamed the user's module."""
    import pytest

    from comparisons.errors import UsageError

    model, x = Net(3, 1e-5), np.ones((4, 3), np.float32)
    for wrong in (model, nnx.state(model), Net):
        with pytest.raises(UsageError) as error:
            doctor_jax(wrong, {}, x, devices=jax.devices()[:2])
        message = str(error.value)
        assert "\n" not in message and "doctor_jax: apply_fn is " in message and "NNX" in message, message
        assert "doctor_jax(lambda variables, *x: model(*x), {}, *inputs)" in message
