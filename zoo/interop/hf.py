"""`load_hf` / `save_hf`: dispatch on the checkpoint's model_type and on the zoo model's class."""

from __future__ import annotations

from pathlib import Path

from zoo.models import BERT, GPT, ZooModel

from . import bert, gpt2, vit
from .exportable import check_native
from .hf_files import read_config, read_weights, write_checkpoint

# Hugging Face model_type -> converter module with load(config, weights) and save(model).
_LOADERS = {"gpt2": gpt2}
_LOADERS["bert"] = bert
_LOADERS["vit"] = vit
_SAVERS = {GPT: gpt2}
_SAVERS[BERT] = bert
_SAVERS[vit.ViT] = vit
TOKEN_ID_KEYS = ("bos_token_id", "eos_token_id", "pad_token_id")


def load_hf(path: str | Path) -> ZooModel:
    """Read a Hugging Face checkpoint directory (config.json + model.safetensors or pytorch_model.bin) into the
    matching zoo model, in eval mode."""
    config = read_config(path)
    model_type = config.get("model_type")
    if model_type not in _LOADERS:
        raise ValueError(
            f"{path}: model_type '{model_type}' is not supported by zoo.interop; supported: {', '.join(_LOADERS)}"
        )
    model = _LOADERS[model_type].load(config, read_weights(path))
    return model.eval()


def label_maps(labels: list[str], num_classes: int | None) -> tuple[dict[str, str], dict[str, int]]:
    """id2label / label2id for a classifier of `num_classes` classes (None: the model has no classifier)."""
    if num_classes is None:
        raise ValueError("labels were given, but the model has no classifier to name")
    labels = [str(label) for label in labels]
    if len(labels) != num_classes:
        raise ValueError(
            f"{len(labels)} labels {labels} were given for a classifier of {num_classes} classes; "
            "give one name per class, in class-id order"
        )
    if len(set(labels)) != len(labels):
        raise ValueError(f"the label names {labels} repeat a name; label2id needs distinct names")
    return {str(i): label for i, label in enumerate(labels)}, {label: i for i, label in enumerate(labels)}


def set_token_ids(config: dict, token_ids: dict[str, int | None]) -> None:
    for key, value in token_ids.items():
        if key not in TOKEN_ID_KEYS:
            raise ValueError(f"unknown special-token id '{key}'; use {', '.join(TOKEN_ID_KEYS)}")
        if value is None:
            continue
        if config.get(key) is not None and config[key] != value:
            raise ValueError(f"{key}={value} from the tokenizer differs from the model's {key}={config[key]}")
        config[key] = int(value)


def save_hf(
    model: ZooModel,
    path: str | Path,
    *,
    labels: list[str] | None = None,
    token_ids: dict[str, int | None] | None = None,
) -> None:
    """Write `model` as a Hugging Face checkpoint directory (config.json + model.safetensors) that
    `from_pretrained` loads.

    labels: the class names of a classifier (BERT classification head, ViT), in class-id order, for id2label /
        label2id; without them transformers' LABEL_0, LABEL_1, ... are written.
    token_ids: bos/eos/pad_token_id of the model's tokenizer (`save_tokenizer` returns them); the model alone does
        not know GPT's, so without them they are null.
    Models without a faithful Hugging Face class (the encoder-decoder Transformer, any non-default architecture
    switch) are refused: `export_hf` writes those it can with their own modelling code (trust_remote_code=True),
    `model.save_pretrained(dir)` any in zoo's own format."""
    check_native(model)
    for cls, converter in _SAVERS.items():
        if isinstance(model, cls):
            config, weights = converter.save(model)
            if labels is not None:
                classes = len(config["id2label"]) if "id2label" in config else None
                config["id2label"], config["label2id"] = label_maps(labels, classes)
            if token_ids:
                set_token_ids(config, token_ids)
            write_checkpoint(path, config, weights)
            return
    raise ValueError(f"save_hf does not support {type(model).__name__} yet")
