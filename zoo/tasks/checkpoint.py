"""Reading zoo checkpoints outside Lightning (evaluation, sampling) with `weights_only=True`."""

from __future__ import annotations

import zipfile
from pathlib import Path

import torch

from zoo.models import MODEL_TYPES, ZooModel


def check_checkpoint_file(path: str | Path) -> None:
    """Fail early, with the path in the message, on a missing or unreadable checkpoint (before a run starts)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path.resolve()}; check ckpt_path")
    if not zipfile.is_zipfile(path):  # torch.save writes a zip archive; a truncated or foreign file is not one
        raise ValueError(f"{path} is not a readable checkpoint (truncated or not written by torch.save)")


def read_checkpoint(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path.resolve()}")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises several types for truncated or foreign files
        raise ValueError(f"{path} is not a readable checkpoint ({type(error).__name__}: {error})") from error
    if not isinstance(checkpoint, dict) or "zoo" not in checkpoint:
        raise ValueError(f"{path} is not a transformer-zoo checkpoint (it has no 'zoo' section)")
    return checkpoint


def load_model_from_checkpoint(path: str | Path, *, task: str | None = None) -> tuple[ZooModel, dict]:
    """Rebuild the model stored in a Lightning checkpoint written by a zoo task.

    Returns (model in eval mode, the checkpoint's 'zoo' section: model_type, model_config, task, tokenizer).
    With `task`, a checkpoint of another task (e.g. a ViT classifier given to GPT sampling) is refused."""
    checkpoint = read_checkpoint(path)
    info = checkpoint["zoo"]
    if task is not None and info.get("task") != task:
        raise ValueError(
            f"{path} holds a {info.get('model_type')} model trained for task '{info.get('task')}', "
            f"but this command needs a '{task}' checkpoint"
        )
    model = build_model(info, path)
    prefix = "net."
    state = {k[len(prefix) :]: v for k, v in checkpoint["state_dict"].items() if k.startswith(prefix)}
    model.load_state_dict(state)
    return model.eval(), info


def build_model(info: dict, path: str | Path) -> ZooModel:
    """A freshly initialized model of the type and config a checkpoint's "zoo" section records."""
    model_type = info.get("model_type")
    if model_type not in MODEL_TYPES:
        raise ValueError(f"{path}: unknown model_type '{model_type}'")
    return MODEL_TYPES[model_type].from_config_dict(info["model_config"])
