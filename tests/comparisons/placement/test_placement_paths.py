"""One path spelling: dotted in every report, with Flax's '/' and Python's subscripts accepted as input."""
from __future__ import annotations

import types

import numpy as np
import pytest
import torch

from comparisons.judge import declared_notes
from comparisons.models import ModelPair
from comparisons.placement import PlacementMap, PlacementRecord, canonical_path, placement_of


@pytest.mark.parametrize("typed, dotted", [
    ("params/fc1/kernel", "params.fc1.kernel"),
    ("out['logits'][0]", "out.logits.0"),
    ('out["hidden"][12]', "out.hidden.12"),
    ("args[3]", "args.3"),
    ("batch_stats/bn1/mean", "batch_stats.bn1.mean"),
    ("params/cache/*", "params.cache.*"),
    ("h.[0-9].attn.*", "h.[0-9].attn.*"),  # a glob's character class is kept
    ("encoder.layer.11.output.dense.weight", "encoder.layer.11.output.dense.weight"),
])
def test_every_spelling_reads_as_the_dotted_one(typed, dotted):
    assert canonical_path(typed) == dotted
    assert canonical_path(dotted) == dotted  # idempotent


def test_placement_records_spell_inputs_and_outputs_dotted():
    rng = np.random.default_rng()
    rows = int(rng.integers(1, 6))
    out = {"logits": torch.zeros(rows, 3), "hidden": (torch.ones(rows, 2), torch.ones(rows, 4))}
    paths = [r.path for r in placement_of(out, role="output", name="out")]
    assert paths == ["out.logits", "out.hidden.0", "out.hidden.1"]
    args = [(torch.ones(rows, 2), torch.ones(rows))]
    assert [r.path for r in placement_of(args, role="input", name="args", per_replica=True)] == ["args.0", "args.1"]


def _pair(**declared) -> ModelPair:
    return ModelPair("p", make_torch=lambda: None, make_flax=lambda: None, mapping=(), make_inputs=lambda *a: None,
                     loss_torch=lambda o, y: 0, loss_jax=lambda o, y: 0, **declared)


def _run(paths: list[str]) -> types.SimpleNamespace:
    records = tuple(PlacementRecord(None, path, "param", "cpu", 0, (2,), "float32") for path in paths)
    return types.SimpleNamespace(placement=PlacementMap(records), dp=types.SimpleNamespace(outputs={}))


@pytest.mark.parametrize("pattern", ["params/cache/*", "params.cache.*", "params['cache']*"])
def test_a_flax_only_pattern_matches_in_any_spelling(pattern):
    pair = _pair(flax_only=(pattern,))
    assert pair.is_flax_only("params.cache.key") and pair.is_flax_only("params/cache/key")
    assert not pair.is_flax_only("params.fc1.kernel")
    notes = declared_notes(pair, [_run(["fc1.weight"]), _run(["params.cache.key", "params.fc1.kernel"])])
    # before one spelling, the Flax-only note said "nothing matched" for a '/' pattern (paths are dotted)
    assert notes == [f"Flax-only (declared, not compared across frameworks): params.cache.key; patterns {[pattern]}"]


def test_torch_only_patterns_read_subscripts_as_dots():
    pair = _pair(torch_only=("past_key_values[0]*",))
    assert pair.is_torch_only("past_key_values.0.1") and not pair.is_torch_only("logits")
