"""dp_jax's internal records: a StrategyCall takes keywords only, a Strategy checks its fields, and the
program cache is keyed on what the program depends on, not on the error label of its caller."""
from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from dp_jax import MAPPED_STRATEGIES as MAPPED
from dp_jax.data_parallel import DataParallel
from dp_jax.strategies import StrategyCall
from dp_jax.strategies.mapped import _program
from dp_jax.strategies.table import TABLE, Strategy


def test_a_strategy_call_cannot_be_built_from_positions():
    with pytest.raises(TypeError):
        StrategyCall(lambda *a: a, {}, (), {}, tuple(jax.devices()[:2]), jax.devices()[0])
    call = StrategyCall(replica_fn=len, variables={}, args=(), kwargs={}, devices=tuple(jax.devices()[:2]),
                        output_device=jax.devices()[0], sync_collections=True)
    assert (call.updates_collections, call.sync_collections) == (False, True)


@pytest.mark.parametrize("fields", [
    {"mapped": True, "stacked": "stacked"},  # the old free string would read as True
    {"mapped": 1, "stacked": False},
    {"mapped": False, "stacked": True},
])
def test_a_strategy_record_refuses_fields_that_do_not_fit(fields):
    build = TABLE["pmap"].build if fields["mapped"] else None
    with pytest.raises((TypeError, ValueError)):
        Strategy("new", build=build, **fields)


def test_the_table_says_which_strategies_take_a_replica_row_split():
    assert {name: record.stacked for name, record in TABLE.items()} == {
        "explicit": False, "pmap": True, "sharded": True, "shard_map": False}
    assert all(dataclasses.is_dataclass(record) for record in TABLE.values())


def _other_structure_for_the_short_chunk(variables, x):
    return {"full": x * variables["w"]} if x.shape[0] == 3 else {"short": x * variables["w"]}


@pytest.mark.parametrize("strategy", MAPPED)
def test_one_cached_program_serves_both_labels_and_each_error_names_its_caller(strategy):
    variables = {"w": np.float32(2.0)}
    x = np.arange(11 * 2, dtype=np.float32).reshape(11, 2)  # 3, 3, 3, 2 on 4 devices
    dp = DataParallel(_other_structure_for_the_short_chunk, [0, 1, 2, 3], strategy=strategy)
    before = _program.cache_info().currsize
    with pytest.raises(ValueError, match=rf"^data_parallel\(strategy='{strategy}'\): replica 3 \(the short last"):
        dp.apply(variables, x)
    after_eager = _program.cache_info().currsize
    with pytest.raises(ValueError, match=rf"^data_parallel\(strategy='{strategy}'\) under jit: replica 3 \(the"):
        jax.jit(lambda v, x: dp.apply(v, x))(variables, x)
    assert after_eager == before + 1 and _program.cache_info().currsize == after_eager
