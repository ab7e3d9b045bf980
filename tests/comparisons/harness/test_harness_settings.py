"""Settings: one frozen record of a comparison's settings, checked and settled once when it is made."""
from __future__ import annotations

import dataclasses
import inspect

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from comparisons import ComparisonError, harness
from comparisons.harness import STRATEGIES, Settings


def test_compare_takes_exactly_the_settings_fields_keyword_only_with_the_same_defaults():
    """One new option is one field: compare()'s keywords and the record cannot drift apart."""
    keywords = {name: p.default for name, p in inspect.signature(harness.compare).parameters.items()
                if p.kind is p.KEYWORD_ONLY}
    fields = {f.name: f.default for f in dataclasses.fields(Settings) if f.name != "caller"}
    assert keywords == fields


def test_a_settings_record_is_frozen():
    made = Settings(batch_size=6, devices=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.batch_size = 7  # type: ignore[misc]


@settings(max_examples=25, deadline=None)
@given(batch=st.integers(1, 10**6), steps=st.integers(1, 50), seed=st.integers(0, 2**31),
       chosen=st.lists(st.sampled_from(list(STRATEGIES)), min_size=1, max_size=8))
def test_made_settings_are_settled_ints_and_each_strategy_once_in_order(batch, steps, seed, chosen):
    made = Settings(batch_size=np.int64(batch), steps=np.int32(steps), seed=np.uint32(seed), strategies=chosen)
    assert (made.batch_size, made.steps, made.seed) == (batch, steps, seed)
    assert all(type(v) is int for v in (made.batch_size, made.steps, made.seed))
    assert made.strategies == tuple(dict.fromkeys(chosen))


def test_no_strategies_means_every_one_and_precision_float64_means_dtype_float64():
    assert Settings().strategies == tuple(STRATEGIES) and len(STRATEGIES) > 3
    wide = Settings(precision="float64")
    assert wide.dtype == "float64" and wide.header("m", "cpu")["precision"] == "float64"
    assert not wide.in_float64 and Settings().in_float64 and not Settings(precision="off").in_float64


@settings(max_examples=20, deadline=None)
@given(name=st.sampled_from(["batch_size", "devices", "steps"]), value=st.integers(-10**6, 0))
def test_a_count_below_one_is_refused_naming_the_caller_the_argument_and_the_value(name, value):
    for caller in ("compare", "compare_distributed"):
        with pytest.raises(ComparisonError) as raised:
            Settings(**{name: value}, caller=caller)
        assert str(raised.value) == f"{caller}: {name}={value}; pass a positive integer"


@pytest.mark.parametrize("kwargs, message", [
    ({"dtype": "float16"}, "compare: dtype='float16' is not supported; use one of"),
    ({"precision": "float128"}, "compare: precision='float128' is not supported"),
    ({"rtol": -1.0}, "compare: rtol=-1.0 (a float); pass a finite number >= 0"),
    ({"atol": "1e-3"}, "compare: atol='1e-3' (a str); pass a finite number >= 0"),
    ({"layers": 1}, "compare: layers=1 is not a bool; pass True or False"),
    ({"padding": "yes"}, "compare: padding='yes' is not a bool"),
    ({"strategies": "explicit"}, "strategies='explicit' is one string"),
    ({"flax": "haiku"}, "compare: flax='haiku' is not supported; use one of nnx, linen"),
    ({"flax": "NNX"}, "compare: flax='NNX' is not supported; use one of nnx, linen"),
])
def test_every_field_is_checked_when_the_record_is_made(kwargs, message):
    with pytest.raises(ComparisonError, match=message.replace("(", r"\(").replace(")", r"\)")):
        Settings(**kwargs)


@settings(max_examples=20, deadline=None)
@given(dtype=st.sampled_from(["float32", "float64"]), precision=st.sampled_from(["float64-check", "off"]),
       rtol=st.none() | st.floats(0, 1), atol=st.none() | st.floats(0, 1))
def test_the_header_is_the_report_s_settings_and_says_where_each_bound_came_from(dtype, precision, rtol, atol):
    made = Settings(dtype=dtype, precision=precision, rtol=rtol, atol=atol, batch_size=7, devices=3)
    header = made.header("my_net", "virtual")
    assert (header["model"], header["batch_size"], header["devices"], header["torch_devices"]) == (
        "my_net", 7, 3, "virtual")
    tolerance = header["tolerance"]
    defaults = {"float32": 1e-5, "float64": 1e-12}  # docs/report_schema.md
    assert tolerance["rtol"] == (defaults[dtype] if rtol is None else rtol)
    assert tolerance["rtol_source"] == ("set by the user" if rtol is not None else f"default for {dtype}")
    assert tolerance["atol"] == atol and (tolerance["atol_source"] == "set by the user") == (atol is not None)
    assert (tolerance["float64_rtol"] is not None) == (dtype == "float32" and precision != "off")
