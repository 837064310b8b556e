"""Which zoo models export how for `transformers`: natively (GPT-2, BERT, ViT without lab switches), with their own
modelling code (zoo/interop/remote_code.py: the rest of those and the Transformer), or not at all (refused in one
line that points to zoo's own format)."""

from __future__ import annotations

from zoo.models import ZooModel

from .remote_code import STEMS


def is_native(model: ZooModel) -> bool:
    """Whether a native Hugging Face class computes `model` exactly."""
    return model.hf_native and not model.outside_native()


def check_native(model: ZooModel) -> None:
    """Raise a one-line ValueError when no native Hugging Face class computes `model` (save_hf writes only those)."""
    if is_native(model):
        return
    check_exportable(model)
    switches = ", ".join(f"{name}={value!r}" for name, value in model.outside_native().items())
    why = (
        f"this {type(model).__name__} uses options ({switches}) that no Hugging Face class computes"
        if switches
        else f"the {type(model).__name__} has no Hugging Face class that computes its layout"
    )
    raise ValueError(
        f"{why}; export it with its own modelling code instead: `zoo-export CKPT DIR` or "
        "`zoo.interop.export_hf(model, DIR)` (loads with trust_remote_code=True)"
    )


def check_exportable(model: ZooModel) -> None:
    """Raise a one-line ValueError when `model` exports neither natively nor with remote code."""
    if type(model) not in STEMS:
        raise ValueError(
            f"the {type(model).__name__} ({model.model_type}) has no Hugging Face class to export to (GPT, BERT, "
            "ViT and the Transformer do); save it in zoo's own format instead: `zoo-export CKPT DIR --format zoo` or "
            "`model.save_pretrained(DIR)`, read back with `ZooModel.from_pretrained(DIR)`"
        )
