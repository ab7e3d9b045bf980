"""A complex leaf is judged on both parts: a twin with the wrong sign of the imaginary part fails, named."""
from __future__ import annotations

import warnings

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from comparisons.judge import Bounds, compare_trees

drawn = settings(max_examples=25, deadline=None)


def complex_of(real, imag, dtype):
    return (real + 1j * imag).astype(dtype)


@drawn
@given(seed=st.integers(0, 2**32 - 1), dtype=st.sampled_from([np.complex64, np.complex128]))
def test_the_wrong_sign_of_the_imaginary_part_fails_on_that_part(seed, dtype):
    rng = np.random.default_rng(seed)
    h = rng.standard_normal((int(rng.integers(1, 6)), int(rng.integers(1, 6)))) + 0.5
    torch_out, wrong = complex_of(h, -h, dtype), complex_of(h, h, dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's ComplexWarning: a cast that drops the imaginary part
        check = compare_trees("outputs", "torch vs jax", {"logits": wrong}, {"logits": torch_out}, Bounds(1e-5))
    assert not check.passed
    failing = {leaf.path for leaf in check.leaves if not leaf.passed}
    assert failing == {"logits.imag"}, check.detail
    assert "logits.imag" in check.detail


@drawn
@given(seed=st.integers(0, 2**32 - 1))
def test_an_honest_complex_leaf_passes_on_both_parts(seed):
    rng = np.random.default_rng(seed)
    h = rng.standard_normal((3, 4))
    out = complex_of(h, -2 * h, np.complex64)
    check = compare_trees("outputs", "torch vs jax", out, out.copy(), Bounds(1e-5))
    assert check.passed and {leaf.path for leaf in check.leaves} == {"real", "imag"}


def test_compare_fails_a_twin_whose_complex_output_has_the_wrong_sign():
    import flax.linen as nn
    import jax.numpy as jnp
    import torch
    from _twins import regression

    from comparisons import compare
    from comparisons.models import pair_from_modules

    class TorchComplex(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(6, 3)

        def forward(self, x):
            h = self.fc(x)
            return torch.complex(h, -h)

    class FlaxComplex(nn.Module):
        sign: float

        @nn.compact
        def __call__(self, x, train: bool = True):
            h = nn.Dense(3, name="fc")(x)
            return jnp.asarray(h + 1j * self.sign * h)

    def loss_torch(out, y):
        return ((out.real - y) ** 2).mean() + (out.imag ** 2).mean()

    def loss_jax(out, y):
        return jnp.mean((out.real - y) ** 2) + jnp.mean(out.imag ** 2)

    seed = int(np.random.default_rng().integers(1000))
    reports = {}
    for sign in (-1.0, 1.0):
        torch.manual_seed(seed)
        pair = pair_from_modules(f"complex_{sign:+.0f}", TorchComplex(), FlaxComplex(sign), make_inputs=regression(),
                                 loss_torch=loss_torch, loss_jax=loss_jax)
        reports[sign] = compare(pair, batch_size=5, devices=2, strategies=["explicit"], steps=1,
                                torch_devices="cpu", seed=seed)
    assert reports[-1.0].ok, reports[-1.0].render("table")
    outputs = next(c for c in reports[1.0].checks
                   if c.subject == "outputs" and c.compared.startswith("torch") and "jax" in c.compared)
    assert not reports[1.0].ok and not outputs.passed
    assert [leaf.path for leaf in outputs.leaves if not leaf.passed] == ["imag"], outputs.detail
