"""`load_hf` / `save_hf`: dispatch on the checkpoint's model_type and on the zoo model's class."""

from __future__ import annotations

from pathlib import Path

from zoo.models import BERT, GPT, ZooModel

from . import bert, gpt2, vit
from .exportable import check_native
from .hf_config import label_maps, set_token_ids
from .hf_files import read_config, read_weights, write_checkpoint

# Hugging Face model_type -> converter module with load(config, weights) and save(model).
_LOADERS = {"gpt2": gpt2}
_LOADERS["bert"] = bert
_LOADERS["vit"] = vit
_SAVERS = {GPT: gpt2}
_SAVERS[BERT] = bert
_SAVERS[vit.ViT] = vit


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
