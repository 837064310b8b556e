"""One registry of models, at their class definitions: a class registers its model_type where it is defined, and
checkpoints, export, model cards and limits read what it declares (what it reads, its positions, its classes, its
Hub task, whether a native Hugging Face class computes it) rather than a chain of isinstance checks."""

from __future__ import annotations

import pytest

from zoo.interop.exportable import check_exportable, is_native
from zoo.interop.limits import trained_context
from zoo.models import BERT, CNN, GPT, MODEL_TYPES, Transformer, ViT


def test_every_model_is_registered_by_its_own_definition():
    assert {c.model_type: c for c in (GPT, BERT, ViT, Transformer, CNN, MODEL_TYPES["deep_mlp"])} == MODEL_TYPES
    assert {c.reads for c in MODEL_TYPES.values()} == {"text", "images"}


def test_a_new_model_is_known_to_checkpoints_and_interop_from_its_class_alone():
    class LongGPT(GPT):
        model_type = "long_gpt_for_this_test"

        def positions(self) -> int:
            return 2 * self.config.block_size

    try:
        assert MODEL_TYPES["long_gpt_for_this_test"] is LongGPT
        model = LongGPT.from_preset("gpt-nano", block_size=16)
        assert trained_context(model) == 32 and trained_context(model, {"block_size": 8}) == 8
        assert is_native(model) and model.pipeline_tag() == "text-generation"
    finally:
        del MODEL_TYPES["long_gpt_for_this_test"]


def test_what_each_model_declares():
    gpt = GPT.from_preset("gpt-nano", block_size=16, bias=False)
    assert gpt.positions() == 16 and gpt.outside_native() == {"bias": False} and not is_native(gpt)
    bert = BERT.from_preset("bert-tiny", head="classification", num_labels=3)
    assert (bert.num_classes(), bert.pipeline_tag(), bert.positions()) == (3, "text-classification", 512)
    vit = ViT.from_preset("vit-ti/16", image_size=32, num_classes=0)
    assert vit.num_classes() is None and vit.positions() is None and vit.outside_native() == {"num_classes": 0}
    assert Transformer.from_preset(Transformer.preset_names()[0]).pipeline_tag() == "translation"
    cnn = CNN.from_preset(CNN.preset_names()[0])
    with pytest.raises(ValueError, match="has no Hugging Face class to export to"):
        check_exportable(cnn)
