"""A bound that lets everything pass is refused before any work runs, naming the argument and the fix."""
from __future__ import annotations

import math

import pytest

from comparisons import ComparisonError, compare


@pytest.mark.parametrize("name", ["rtol", "atol"])
@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, -1e-5, "1e-5", True])
def test_an_infinite_negative_or_non_number_bound_is_refused_by_name(name, value):
    with pytest.raises(ComparisonError, match=rf"{name}=.*pass a finite number >= 0"):
        compare("mlp", **{name: value})
