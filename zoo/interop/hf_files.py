"""Reading and writing the files of a Hugging Face checkpoint directory. model.safetensors written here records a
checksum of its tensors (zoo.models.hub.CHECKSUM_KEY), verified when read back; pytorch_model.bin is read
weights-only."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from zoo.core.weights_file import torch_load_weights
from zoo.models.hub import CHECKSUM_KEY, verify_weights, weights_checksum

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


def read_config(path: str | Path) -> dict:
    directory = Path(path)
    config_file = directory / "config.json"
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory} is not a directory; pass a Hugging Face checkpoint directory")
    if not config_file.is_file():
        raise FileNotFoundError(f"no config.json in {directory}; a Hugging Face checkpoint directory needs one")
    return json.loads(config_file.read_text())


def read_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """The state dict of model.safetensors, else pytorch_model.bin (loaded with weights_only=True)."""
    directory = Path(path)
    if (directory / "model.safetensors").is_file():
        return load_safetensors(directory / "model.safetensors")
    if (directory / "pytorch_model.bin").is_file():
        return torch_load_weights(directory / "pytorch_model.bin")
    sharded = sorted(directory.glob("*.safetensors.index.json")) + sorted(directory.glob("*.bin.index.json"))
    if sharded:
        index = json.loads(sharded[0].read_text())
        weights: dict[str, torch.Tensor] = {}
        for shard in sorted(set(index["weight_map"].values())):
            file = directory / shard
            weights.update(load_safetensors(file) if shard.endswith(".safetensors") else torch_load_weights(file))
        return weights
    raise FileNotFoundError(f"no weights in {directory}: expected one of {', '.join(WEIGHT_FILES)}")


def load_safetensors(file: Path) -> dict[str, torch.Tensor]:
    weights = load_file(file)
    with safe_open(str(file), framework="pt") as handle:
        recorded = (handle.metadata() or {}).get(CHECKSUM_KEY)
    verify_weights(weights, recorded, file)
    return weights


def write_checkpoint(path: str | Path, config: dict, weights: dict[str, torch.Tensor]) -> None:
    directory = Path(path)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    tensors = {k: v.detach().contiguous().cpu() for k, v in weights.items()}
    metadata = {"format": "pt", CHECKSUM_KEY: weights_checksum(tensors)}
    save_file(tensors, directory / "model.safetensors", metadata=metadata)


# The config.json keys every export for transformers shares, native or remote code.
TOKEN_ID_KEYS = ("bos_token_id", "eos_token_id", "pad_token_id")


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


def finish_config(config: dict, model, labels: list[str] | None, token_ids: dict[str, int | None] | None) -> dict:
    """`config` with the class names of a classifier (default LABEL_0, LABEL_1, ...) and the special-token ids of
    the tokenizer that goes along (bos/eos/pad_token_id, checked against the model's own)."""
    classes = model.num_classes()
    if labels is not None or classes:
        names = labels if labels is not None else [f"LABEL_{i}" for i in range(classes)]
        config["id2label"], config["label2id"] = label_maps(names, classes)
    for key, value in (token_ids or {}).items():
        if key not in TOKEN_ID_KEYS:
            raise ValueError(f"unknown special-token id '{key}'; use {', '.join(TOKEN_ID_KEYS)}")
        if value is not None and config.get(key) is not None and config[key] != value:
            raise ValueError(f"{key}={value} from the tokenizer differs from the model's {key}={config[key]}")
        if value is not None:
            config[key] = int(value)
    return config
