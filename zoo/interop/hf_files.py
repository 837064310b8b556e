"""Reading and writing the files of a Hugging Face checkpoint directory."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

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
        return load_file(directory / "model.safetensors")
    if (directory / "pytorch_model.bin").is_file():
        return torch.load(directory / "pytorch_model.bin", map_location="cpu", weights_only=True)
    sharded = sorted(directory.glob("*.safetensors.index.json")) + sorted(directory.glob("*.bin.index.json"))
    if sharded:
        index = json.loads(sharded[0].read_text())
        weights: dict[str, torch.Tensor] = {}
        for shard in sorted(set(index["weight_map"].values())):
            file = directory / shard
            weights.update(
                load_file(file)
                if shard.endswith(".safetensors")
                else torch.load(file, map_location="cpu", weights_only=True)
            )
        return weights
    raise FileNotFoundError(f"no weights in {directory}: expected one of {', '.join(WEIGHT_FILES)}")


def write_checkpoint(path: str | Path, config: dict, weights: dict[str, torch.Tensor]) -> None:
    directory = Path(path)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    save_file(
        {k: v.detach().contiguous().cpu() for k, v in weights.items()},
        directory / "model.safetensors",
        metadata={"format": "pt"},
    )
