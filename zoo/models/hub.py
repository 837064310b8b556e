"""zoo's own model format: `model.save_pretrained(dir)` / `ZooModel.from_pretrained(dir)`.

A directory with config.json (every field of the model's config dataclass, plus `zoo_model_type`) and
model.safetensors, written and read through huggingface_hub's PyTorchModelHubMixin, which also gives
`push_to_hub`, loading from a Hub repository id, and a model card. Unlike a Hugging Face export this keeps any model
exactly, the encoder-decoder Transformer and the lab's architecture switches included.

Loading is strict: the class comes from `zoo_model_type` among zoo's own model classes (nothing named in the file is
imported or called), unknown config fields and values are errors (the config dataclass validates them), and every
weight must be present with its shape. model.safetensors records a checksum of the weights in its metadata
(`weights_checksum`), verified after loading: safetensors itself checks the header, not the tensor bytes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from huggingface_hub import PyTorchModelHubMixin, hf_hub_download
from safetensors import safe_open
from safetensors.torch import load_model, save_model

CONFIG_NAME, WEIGHTS_NAME = "config.json", "model.safetensors"
TYPE_KEY = "zoo_model_type"  # not "model_type": transformers would take a "bert" directory for one of its own
CHECKSUM_KEY = "zoo_weights_checksum"  # in the safetensors metadata


def weights_checksum(state_dict: Mapping[str, Any]) -> str:
    """ "blake2b:<hex>" over every tensor of a state dict, in sorted key order: each key, dtype and shape, then the
    raw bytes (viewed as uint8, so bf16 works and nothing is copied on CPU). Non-tensor entries are left out.

    It lives on the models floor because checkpoints (zoo.tasks), zoo's own format (here) and Hugging Face exports
    (zoo.interop) all record and verify it."""
    digest = hashlib.blake2b(digest_size=32)
    for key in sorted(state_dict):
        tensor = state_dict[key]
        if not isinstance(tensor, torch.Tensor):
            continue
        tensor = tensor.detach()
        digest.update(f"{key}|{tensor.dtype}|{tuple(tensor.shape)}\n".encode())
        raw = tensor.cpu().contiguous().reshape(-1).view(torch.uint8).numpy()
        digest.update(memoryview(raw))
    return f"blake2b:{digest.hexdigest()}"


def corrupted_weights_error(source: str | Path) -> ValueError:
    return ValueError(
        f"{source}: weights do not match their checksum (the file is corrupted); restore it from a backup or "
        "write it again"
    )


def verify_weights(state_dict: Mapping[str, Any], recorded: str | None, source: str | Path) -> bool:
    """Raise the one-line corruption error when `recorded` (a weights_checksum) does not match; False when there
    is nothing to check (a file written before checksums were recorded), True when it matches."""
    if recorded is None:
        return False
    if weights_checksum(state_dict) != recorded:
        raise corrupted_weights_error(source)
    return True


class ZooHubMixin(PyTorchModelHubMixin, library_name="transformer-zoo"):
    """save_pretrained / from_pretrained / push_to_hub for ZooModel (which sets `model_type` and `config`)."""

    def _save_pretrained(self, save_directory: Path) -> None:
        config = {TYPE_KEY: self.model_type, **dataclasses.asdict(self.config)}
        (save_directory / CONFIG_NAME).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        # safetensors' save_model stores a tied matrix once; the checksum covers the model's full state dict, which
        # is what load_model fills in again.
        metadata = {"format": "pt", CHECKSUM_KEY: weights_checksum(self.state_dict())}
        save_model(self, str(save_directory / WEIGHTS_NAME), metadata=metadata)

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | Path, **kwargs):
        """A model saved by `save_pretrained`: a local directory or a Hub repository id. On a subclass (GPT,
        BERT, ...) a directory of another model type is refused; on ZooModel the type comes from the file."""
        path = Path(pretrained_model_name_or_path)
        # A Hub id is "name" or "owner/name"; anything else that does not exist is a mistyped local path.
        looks_local = path.is_absolute() or str(path).startswith((".", "~")) or len(path.parts) > 2
        if path.exists() and not path.is_dir():
            raise FileNotFoundError(f"{path} is a file; from_pretrained reads a directory written by save_pretrained")
        if path.is_dir() and not (path / CONFIG_NAME).is_file():
            raise FileNotFoundError(f"no {CONFIG_NAME} in {path}; it was not written by save_pretrained")
        if not path.exists() and looks_local:
            raise FileNotFoundError(f"model directory not found: {path.resolve()}")
        return super().from_pretrained(pretrained_model_name_or_path, **kwargs)

    @classmethod
    def _from_pretrained(
        cls,
        *,
        model_id: str,
        revision,
        cache_dir,
        force_download,
        local_files_only,
        token,
        config: Any = None,
        map_location: str = "cpu",
        strict: bool = True,
        **kwargs,
    ):
        if kwargs:
            raise TypeError(f"unexpected from_pretrained option(s) {', '.join(sorted(kwargs))}")
        if dataclasses.is_dataclass(config):
            config = dataclasses.asdict(config)
        if not isinstance(config, dict):
            raise ValueError(f"{model_id}: no {CONFIG_NAME} with a zoo model config")
        model_cls = cls._class_for(config.get(TYPE_KEY), model_id)
        fields = {k: v for k, v in config.items() if k != TYPE_KEY}
        known = {f.name for f in dataclasses.fields(model_cls.config_class)}
        unknown = sorted(set(fields) - known)
        if unknown:
            raise ValueError(
                f"{model_id}/{CONFIG_NAME} has option(s) {', '.join(unknown)} that "
                f"{model_cls.config_class.__name__} does not know (written by another version of zoo?)"
            )
        model = model_cls.from_config_dict(fields)  # validated, with what older configs imply (e.g. BN-ViT's FFN norm)
        if Path(model_id).is_dir():
            weights = Path(model_id) / WEIGHTS_NAME
            if not weights.is_file():
                raise FileNotFoundError(f"no {WEIGHTS_NAME} in {model_id}")
        else:
            weights = hf_hub_download(
                repo_id=model_id,
                filename=WEIGHTS_NAME,
                revision=revision,
                cache_dir=cache_dir,
                force_download=force_download,
                token=token,
                local_files_only=local_files_only,
            )
        try:
            load_model(model, str(weights), strict=strict, device=map_location)
        except RuntimeError as error:  # missing/unexpected keys or shapes: say so in one line
            raise ValueError(
                f"{weights} does not fit the {model_cls.__name__} its config describes: {' '.join(str(error).split())}"
            ) from error
        with safe_open(str(weights), framework="pt") as file:
            recorded = (file.metadata() or {}).get(CHECKSUM_KEY)
        verify_weights(model.state_dict(), recorded, weights)
        return model.eval()

    @classmethod
    def _class_for(cls, model_type: str | None, source: str):
        """The zoo class of `model_type`, among the subclasses of the class from_pretrained was called on."""
        classes = {getattr(c, "model_type", None): c for c in _subclasses(cls)}
        if getattr(cls, "model_type", None) is not None:
            classes[cls.model_type] = cls
        if model_type in classes:
            return classes[model_type]
        if getattr(cls, "model_type", None) is not None:
            raise ValueError(
                f"{source} holds a zoo '{model_type}' model, not a '{cls.model_type}' "
                f"({cls.__name__}); load it with ZooModel.from_pretrained"
            )
        raise ValueError(
            f"{source}: {TYPE_KEY} {model_type!r} is not a zoo model type; "
            f"known: {', '.join(sorted(t for t in classes if t))}"
        )


def _subclasses(cls: type) -> list[type]:
    found = []
    for sub in cls.__subclasses__():
        found += [sub, *_subclasses(sub)]
    return found
