"""Reading and writing the files of a Hugging Face checkpoint directory.

model.safetensors written here records a checksum of its tensors in the metadata (zoo.models.hub.CHECKSUM_KEY),
verified when zoo reads it back; files from elsewhere have none and load as they are. pytorch_model.bin is read with
weights_only=True, a pickle that would run code refused in one line."""

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
        return _load_safetensors(directory / "model.safetensors")
    if (directory / "pytorch_model.bin").is_file():
        return _load_bin(directory / "pytorch_model.bin")
    sharded = sorted(directory.glob("*.safetensors.index.json")) + sorted(directory.glob("*.bin.index.json"))
    if sharded:
        index = json.loads(sharded[0].read_text())
        weights: dict[str, torch.Tensor] = {}
        for shard in sorted(set(index["weight_map"].values())):
            file = directory / shard
            weights.update(_load_safetensors(file) if shard.endswith(".safetensors") else _load_bin(file))
        return weights
    raise FileNotFoundError(f"no weights in {directory}: expected one of {', '.join(WEIGHT_FILES)}")


def _load_safetensors(file: Path) -> dict[str, torch.Tensor]:
    weights = load_file(file)
    with safe_open(str(file), framework="pt") as handle:
        recorded = (handle.metadata() or {}).get(CHECKSUM_KEY)
    verify_weights(weights, recorded, file)
    return weights


def _load_bin(file: Path) -> dict[str, torch.Tensor]:
    return torch_load_weights(file)


def write_checkpoint(path: str | Path, config: dict, weights: dict[str, torch.Tensor]) -> None:
    directory = Path(path)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    tensors = {k: v.detach().contiguous().cpu() for k, v in weights.items()}
    metadata = {"format": "pt", CHECKSUM_KEY: weights_checksum(tensors)}
    save_file(tensors, directory / "model.safetensors", metadata=metadata)
