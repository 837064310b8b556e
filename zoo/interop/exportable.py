"""Which zoo models export how for `transformers`.

- natively, to a Hugging Face class that computes them exactly: the reference architectures of GPT (GPT-2),
  BERT and ViT, without the lab's switches;
- with their own modelling code (trust_remote_code=True, zoo/interop/remote_code.py): those models with any lab
  switch, whose native class would load the weights without a complaint and compute something else, and the
  encoder-decoder Transformer (torch.nn.Transformer's layout, which MarianMT/BART do not compute);
- not at all: the rest, refused in one line that points to zoo's own format (`model.save_pretrained(dir)`).
"""

from __future__ import annotations

from zoo.models import ZooModel

from .remote_code import SPECS

ZOO_FORMAT_HINT = (
    "save it in zoo's own format instead: `zoo-export CKPT DIR --format zoo` or "
    "`model.save_pretrained(DIR)`, read back with `ZooModel.from_pretrained(DIR)`"
)


def is_native(model: ZooModel) -> bool:
    """Whether a native Hugging Face class computes `model` exactly."""
    return model.hf_native and not model.outside_native()


def has_remote_code(model: ZooModel) -> bool:
    return type(model) in SPECS


def check_native(model: ZooModel) -> None:
    """Raise a one-line ValueError when no native Hugging Face class computes `model` (save_hf writes only those)."""
    if is_native(model):
        return
    if has_remote_code(model):
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
    check_exportable(model)


def check_exportable(model: ZooModel) -> None:
    """Raise a one-line ValueError when `model` exports neither natively nor with remote code."""
    if is_native(model):
        return
    if has_remote_code(model):  # its code is zoo's own: every option of its config is computed
        return
    if not model.hf_native:
        # Checked first: the export would otherwise stop at a detail (a CNN's image normalization) that is not why.
        raise ValueError(
            f"the {type(model).__name__} ({model.model_type}) has no Hugging Face class to export to (GPT, BERT, "
            f"ViT and the Transformer do); " + ZOO_FORMAT_HINT
        )
    switches = model.nondefault_switches()
    listed = ", ".join(f"{name}={value!r}" for name, value in switches.items())
    raise ValueError(
        f"this {type(model).__name__} uses non-default architecture switches ({listed}) that no Hugging Face "
        f"class computes, and it has no remote-code export yet; " + ZOO_FORMAT_HINT
    )
