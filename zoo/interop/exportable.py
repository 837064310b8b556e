"""Which zoo models have a faithful Hugging Face class: the reference architectures, without the lab's switches.

A model trained with, say, rotary positions or additive attention scores would load into GPT2LMHeadModel without a
complaint and compute something else; such models are refused here, naming the switches, and belong in zoo's own
format (`model.save_pretrained(dir)`), which keeps every config field.
"""

from __future__ import annotations

from zoo.models import BERT, GPT, Transformer, ViT, ZooModel

# The zoo models that have a Hugging Face class (GPT2LMHeadModel, BertFor*, ViTForImageClassification).
HF_CLASSES = (GPT, BERT, ViT)

ZOO_FORMAT_HINT = (
    "save it in zoo's own format instead: `zoo-export CKPT DIR --format zoo` or "
    "`model.save_pretrained(DIR)`, read back with `ZooModel.from_pretrained(DIR)`"
)


def check_exportable(model: ZooModel) -> None:
    """Raise a one-line ValueError when `model` has no faithful Hugging Face counterpart."""
    if isinstance(model, Transformer):
        raise ValueError(
            "the encoder-decoder Transformer has no faithful Hugging Face class (it is torch.nn.Transformer's layout: "
            "a LayerNorm after each post-LN stack and interleaved sinusoids, which MarianMT/BART do not compute); "
            + ZOO_FORMAT_HINT
        )
    if not isinstance(model, HF_CLASSES):
        # Checked first: the export would otherwise stop at a detail (a CNN's image normalization) that is not why.
        raise ValueError(
            f"the {type(model).__name__} ({model.model_type}) has no Hugging Face class to export to (GPT, BERT and "
            f"ViT do); " + ZOO_FORMAT_HINT
        )
    switches = model.nondefault_switches()  # the lab's switches that differ from the reference
    if switches:
        listed = ", ".join(f"{name}={value!r}" for name, value in switches.items())
        raise ValueError(
            f"this {type(model).__name__} uses non-default architecture switches ({listed}) that no Hugging Face "
            f"class computes; " + ZOO_FORMAT_HINT
        )
