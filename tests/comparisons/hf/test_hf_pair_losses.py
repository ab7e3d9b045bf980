"""hf.pair refuses one loss given alone: the other side would train on the derived loss (issue 36)."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from comparisons import hf
from comparisons.errors import UsageError


def a_loss(output, targets):
    return output


@given(alone=st.sampled_from(["loss_torch", "loss_jax"]))
def test_a_loss_without_its_twin_is_refused_naming_both(alone):
    missing = {"loss_torch": "loss_jax", "loss_jax": "loss_torch"}[alone]
    with pytest.raises(UsageError, match=f"hf.pair 'tiny': {alone}= without {missing}=; .* pass {missing}="):
        hf.pair("tiny", object(), object(), **{alone: a_loss})
