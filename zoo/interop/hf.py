"""`load_hf` / `save_hf`: dispatch on the checkpoint's model_type and on the zoo model's class."""

from __future__ import annotations

from pathlib import Path

from zoo.models import GPT, ZooModel
from zoo.models import BERT

from . import gpt2
from . import bert
from . import vit
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


def save_hf(model: ZooModel, path: str | Path) -> None:
    """Write `model` as a Hugging Face checkpoint directory that `from_pretrained` loads."""
    for cls, converter in _SAVERS.items():
        if isinstance(model, cls):
            config, weights = converter.save(model)
            write_checkpoint(path, config, weights)
            return
    raise ValueError(f"save_hf does not support {type(model).__name__} yet")
