"""Everything a `transformers` user needs in one directory: the model, its tokenizer or image processor, and for a
causal LM its generation defaults. `zoo-export` (zoo/entry/export.py) feeds this from a training checkpoint."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from zoo.models import BERT, GPT, ViT, ZooModel

from .exportable import check_exportable
from .hf import label_maps, save_hf
from .hf_image_processor import save_image_processor
from .hf_tokenizer import TOKENIZER_FILES, save_tokenizer

# zoo's generate.py samples with these by default; the exported model does the same unless told otherwise
# (pipeline(..., do_sample=False) for greedy decoding).
SAMPLING_DEFAULTS = {"do_sample": True, "temperature": 0.8, "top_k": 200}
EXPORT_FILES = (
    "config.json",
    "model.safetensors",
    "generation_config.json",
    "preprocessor_config.json",
    *TOKENIZER_FILES,
)


def _save_generation_config(directory: Path, token_ids: dict[str, int | None]) -> None:
    config = {**{k: v for k, v in token_ids.items() if v is not None}, **SAMPLING_DEFAULTS}
    if token_ids.get("eos_token_id") is not None and token_ids.get("pad_token_id") is None:
        config["pad_token_id"] = token_ids["eos_token_id"]  # GPT-2's habit: pad batched generation with eos
    (directory / "generation_config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def rgb_from_grayscale(model: ViT) -> ViT:
    """A 1-channel ViT as a 3-channel one whose patch embedding averages the channels: on a grayscale image given
    as RGB (R = G = B, normalized with the same mean/std per channel) its logits are the original's. transformers'
    image pipelines convert every image to RGB, so a 1-channel model would refuse their inputs."""
    config = dataclasses.replace(model.config, in_channels=3)
    rgb = ViT(config).eval()
    state = model.state_dict()
    state["patch_embed.proj.weight"] = state["patch_embed.proj.weight"].repeat(1, 3, 1, 1) / 3
    rgb.load_state_dict(state)
    return rgb


def _num_classes(model: ZooModel) -> int | None:
    if isinstance(model, BERT) and model.config.head == "classification":
        return model.config.num_labels
    if isinstance(model, ViT) and model.config.num_classes:
        return model.config.num_classes
    return None


def export_hf(
    model: ZooModel,
    directory: str | Path,
    *,
    tokenizer_json: str | None = None,
    labels: list[str] | None = None,
    image_mean: list[float] | None = None,
    image_std: list[float] | None = None,
) -> list[str]:
    """Write `model` and what it was trained with as a Hugging Face directory; returns the file names written.

    tokenizer_json: the zoo tokenizer of a GPT or BERT (a checkpoint's "zoo" section stores it).
    labels: class names of a BERT classifier or a ViT, in class-id order.
    image_mean / image_std: the normalization a ViT was trained with, for preprocessor_config.json.
    A grayscale (1-channel) ViT is written as the equivalent 3-channel model (`rgb_from_grayscale`)."""
    check_exportable(model)
    if tokenizer_json is not None and not isinstance(model, (GPT, BERT)):
        raise ValueError(f"a tokenizer was given for a {type(model).__name__}, which reads no text")
    if (image_mean is None) != (image_std is None):
        raise ValueError("give both image_mean and image_std (the normalization the ViT was trained with), or neither")
    if image_mean is not None and not isinstance(model, ViT):
        raise ValueError(f"image_mean/image_std were given for a {type(model).__name__}, which reads no images")
    if labels is not None:
        label_maps(labels, _num_classes(model))  # checked before anything is written
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    token_ids: dict[str, int | None] = {}
    if tokenizer_json is not None:
        max_length = model.config.block_size if isinstance(model, GPT) else model.config.max_position_embeddings
        token_ids = save_tokenizer(tokenizer_json, directory, model_max_length=max_length)
    if isinstance(model, ViT) and model.config.in_channels == 1:
        model = rgb_from_grayscale(model)
        image_mean = None if image_mean is None else list(image_mean) * 3
        image_std = None if image_std is None else list(image_std) * 3
    save_hf(model, directory, labels=labels, token_ids=token_ids)
    if isinstance(model, GPT):
        _save_generation_config(directory, token_ids)
    if image_mean is not None:
        c = model.config
        save_image_processor(directory, image_size=c.image_size, mean=image_mean, std=image_std, channels=c.in_channels)
    return sorted(p.name for p in directory.iterdir() if p.name in EXPORT_FILES)
