"""NNX twins from user code: through `--import` (a module that registers its pair), the `dp_compare.pairs` entry
point group, and an NNX module named where a ModelPair is expected (refused in one line naming NNX)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from comparisons.models import pair as registry
from comparisons.models import user_pairs

HELPERS = str(Path(__file__).parent)
MODULE = (f"import sys\nsys.path.insert(0, {HELPERS!r})\n"
          "from flax import nnx\n"
          "from comparisons.models import register\n"
          "from _nnx_twins import NNXLM, lm_pair\n"
          "PAIR = lm_pair()\n"
          "PAIR = PAIR.__class__(**{**PAIR.__dict__, 'name': {name!r}})\n"
          "MODEL = NNXLM(rngs=nnx.Rngs(0))\n"
          "{register}\n")


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """Writes a user's module defining an NNX pair; forgets it, and what it registered, afterwards."""
    written = []

    def write(name: str, pair_name: str, register: bool = False) -> str:
        source = MODULE.replace("{name!r}", repr(pair_name)).replace(
            "{register}", "register(PAIR)" if register else "")
        (tmp_path / f"{name}.py").write_text(source)
        written.append((name, pair_name))
        return name
    monkeypatch.syspath_prepend(str(tmp_path))
    yield write
    for name, pair_name in written:
        sys.modules.pop(name, None)
        registry._REGISTRY.pop(pair_name, None)


def test_import_of_a_module_registering_an_nnx_pair_registers_it(user_module):
    user_pairs.import_module(user_module("nnx_registering", "nnx_imported", register=True), "--import")
    assert repr(registry.get("nnx_imported").jax_side) == "NNX"


def test_an_entry_point_offering_an_nnx_pair_registers_it(user_module, tmp_path):
    module = user_module("nnx_offering", "nnx_offered")
    dist_info = tmp_path / "nnx_dist-0.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: nnx-dist\nVersion: 0.1\n")
    (dist_info / "entry_points.txt").write_text(f"[test_nnx.pairs]\nnnx = {module}:PAIR\n")
    assert user_pairs.load_entry_points("test_nnx.pairs") == ["nnx_offered"]
    assert repr(registry.get("nnx_offered").jax_side) == "NNX"


def test_an_nnx_module_named_where_a_pair_is_expected_is_refused_naming_nnx(user_module):
    module = user_module("nnx_model_only", "nnx_unused")
    with pytest.raises(user_pairs.UserPairError) as error:
        user_pairs.load_pair(f"{module}:MODEL")
    message = str(error.value)
    assert "\n" not in message and len(message) < 400, message
    assert f"--pair {module}:MODEL is an NNX Module (NNXLM), not a comparisons.models.ModelPair" in message
    assert "pair_from_modules(" in message
