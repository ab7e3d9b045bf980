"""The head sweep builds each head on the config class it takes: CLIPTextModel and CLIPVisionModel take the CLIP
config's text and vision parts, not the CLIPConfig the family's pair takes. Before, the sweep passed them the
whole CLIPConfig and recorded a raw `AttributeError: 'CLIPConfig' object has no attribute 'hidden_size'`."""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers", reason="needs the hf extra: pip install -e '.[hf]'")
torch = pytest.importorskip("torch")

from comparisons.hf import sweep  # noqa: E402

EVERY_CLASS = [(family, torch_class) for family, (main, flax_main) in sweep.families().items()
               for torch_class in [main, *(t for t, _ in sweep.heads(family, flax_main))]]


def test_every_family_and_head_gets_a_config_of_the_class_it_is_built_on():
    wrong = [(family, torch_class, type(sweep.head_config(family, torch_class)).__name__)
             for family, torch_class in EVERY_CLASS
             if not isinstance(sweep.head_config(family, torch_class), getattr(transformers, torch_class).config_class)]
    assert len(EVERY_CLASS) > 100 and not wrong, wrong


@pytest.mark.parametrize("torch_class", ["CLIPTextModel", "CLIPVisionModel", "CLIPTextModelWithProjection"])
def test_a_clip_part_is_built_tiny_from_the_family_s_tiny_part(torch_class):
    config = sweep.head_config("clip", torch_class)
    family_config = sweep.tiny_config("clip")
    part = family_config.vision_config if "Vision" in torch_class else family_config.text_config
    assert config.to_dict() == part.to_dict() and config.hidden_size == 16
    model = getattr(transformers, torch_class)(config)
    assert sum(p.numel() for p in model.parameters()) < 50_000  # tiny, as every row of the sweep


def test_a_head_on_the_family_s_own_config_gets_that_config():
    config = sweep.head_config("bert", "BertForQuestionAnswering")
    assert type(config) is transformers.BertConfig and config.to_dict() == sweep.tiny_config("bert").to_dict()
