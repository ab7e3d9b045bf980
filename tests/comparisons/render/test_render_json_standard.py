"""The JSON report is standard JSON: a NaN or Inf figure (a run that blew up) is a string, never a bare NaN."""
from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
from _helpers_harness import small_report
from hypothesis import given, settings
from hypothesis import strategies as st

from comparisons.verdicts import Leaf

NAMES = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def strict(text: str):
    def refuse(constant):
        raise ValueError(f"not standard JSON: bare {constant}")
    return json.loads(text, parse_constant=refuse)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), name=st.sampled_from(sorted(NAMES)))
def test_a_figure_that_is_not_finite_is_written_as_its_name(seed, name):
    rng = np.random.default_rng(seed)
    value = NAMES[name]
    report = small_report(bool(rng.integers(2)), seed)
    at = int(rng.integers(len(report.checks)))
    check = report.checks[at]
    leaf = Leaf("head.kernel", value, value, False, "port", "non_finite")
    report.checks[at] = dataclasses.replace(check, max_abs=value, leaves=(*check.leaves, leaf))
    report.drift = [{"step": 1, "loss": 1e-7, "gradients": value, "params": 2e-7, "worst": value,
                     "strategy": "jax:pmap", "float64": None}]
    data = strict(report.to_json())
    assert data["checks"][at]["max_abs"] == name and data["checks"][at]["leaves"][-1]["rel"] == name
    assert data["drift"][0]["gradients"] == name and data["drift"][0]["loss"] == 1e-7
    assert data["checks"][at]["subject"] == check.subject  # everything else as before
