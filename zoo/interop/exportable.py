"""Which zoo models export how for `transformers`.

- natively, to a Hugging Face class that computes them exactly: the reference architectures of GPT (GPT-2),
  BERT and ViT, without the lab's switches;
- with their own modelling code (trust_remote_code=True, zoo/interop/remote_code.py): those models with any lab
  switch, whose native class would load the weights without a complaint and compute something else, and the
  encoder-decoder Transformer (torch.nn.Transformer's layout, which MarianMT/BART do not compute);
- not at all: the rest, refused in one line that points to zoo's own format (`model.save_pretrained(dir)`).
"""

from __future__ import annotations

from zoo.models import BERT, GPT, ViT, ZooModel

from .remote_code import SPECS

# The zoo models that have a Hugging Face class (GPT2LMHeadModel, BertFor*, ViTForImageClassification).
HF_CLASSES = (GPT, BERT, ViT)

ZOO_FORMAT_HINT = (
    "save it in zoo's own format instead: `zoo-export CKPT DIR --format zoo` or "
    "`model.save_pretrained(DIR)`, read back with `ZooModel.from_pretrained(DIR)`"
)


def outside_native(model: ZooModel) -> dict:
    """The options of `model` that its native Hugging Face class cannot compute: the lab switches, and the model
    options outside the native layout (ViTForImageClassification has a class token, token pooling and a head;
    GPT2LMHeadModel has biases)."""
    found = dict(model.nondefault_switches())
    c = model.config
    if isinstance(model, ViT):
        if c.pool != "token" or not c.class_token:
            found |= {"pool": c.pool, "class_token": c.class_token}
        if not c.num_classes:
            found["num_classes"] = c.num_classes
    if isinstance(model, GPT) and not c.bias:
        found["bias"] = c.bias
    return found


def is_native(model: ZooModel) -> bool:
    """Whether a native Hugging Face class computes `model` exactly."""
    return isinstance(model, HF_CLASSES) and not outside_native(model)


def has_remote_code(model: ZooModel) -> bool:
    return type(model) in SPECS


def check_native(model: ZooModel) -> None:
    """Raise a one-line ValueError when no native Hugging Face class computes `model` (save_hf writes only those)."""
    if is_native(model):
        return
    if has_remote_code(model):
        switches = ", ".join(f"{name}={value!r}" for name, value in outside_native(model).items())
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
    if not isinstance(model, HF_CLASSES):
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
