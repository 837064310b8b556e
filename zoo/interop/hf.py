"""`load_hf` / `save_hf`: dispatch on the checkpoint's model_type and on the zoo model's class."""

from __future__ import annotations

from pathlib import Path

from zoo.models import BERT, GPT, ViT, ZooModel

from . import bert, gpt2, vit
from .exportable import check_native
from .hf_files import finish_config, read_config, read_weights, write_checkpoint

# Hugging Face model_type -> converter module with load(config, weights) and save(model).
_LOADERS = {"gpt2": gpt2, "bert": bert, "vit": vit}
_SAVERS = {GPT: gpt2, BERT: bert, ViT: vit}


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
    `from_pretrained` loads. labels: a classifier's class names, in class-id order (default LABEL_0, ...).
    token_ids: bos/eos/pad_token_id of the model's tokenizer (`save_tokenizer` returns them). A model no native
    class computes is refused (`export_hf` writes it with its own modelling code)."""
    check_native(model)
    config, weights = _SAVERS[type(model)].save(model)
    write_checkpoint(path, finish_config(config, model, labels, token_ids), weights)
