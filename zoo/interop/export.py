"""Everything a `transformers` user needs in one directory: the model, its tokenizer or image processor, for a
causal LM its generation defaults, the trained context length (the tokenizer's model_max_length, GPT's generation
max_length) and a model card (README.md). `zoo-export` (zoo/entry/export.py) feeds this from a training checkpoint
and its run directory."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from zoo.models import Transformer, ViT, ZooModel

from .exportable import check_exportable, is_native
from .hf import save_hf
from .hf_files import label_maps
from .hf_tokenizer import TOKENIZER_FILES, save_tokenizer
from .limits import trained_context
from .model_card import TrainingRun, write_model_card
from .remote_code import REMOTE_FILES, save_remote

# zoo's generate.py samples with these by default; so does the export (do_sample=False for greedy decoding).
SAMPLING_DEFAULTS = {"do_sample": True, "temperature": 0.8, "top_k": 200}
EXPORT_FILES = (
    "config.json",
    "model.safetensors",
    "generation_config.json",
    "preprocessor_config.json",
    "README.md",
    *TOKENIZER_FILES,
    *REMOTE_FILES,
)


def _generation_config(model: ZooModel, token_ids: dict[str, int | None], context: int, stop: bool) -> dict:
    if isinstance(model, Transformer):
        # zoo's Transformer.generate: greedy from BOS, stopping at EOS. With learned or sinusoidal positions the
        # decoder has max_len of them: BOS + max_len tokens (the last is never fed back), so max_length = max_len + 1.
        c = model.config
        config = {"decoder_start_token_id": c.bos_token_id, "do_sample": False, "num_beams": 1}
        config |= {"bos_token_id": c.bos_token_id, "eos_token_id": c.eos_token_id, "pad_token_id": c.pad_token_id}
        return config | ({"max_length": c.max_len + 1} if c.positions in ("learned", "sinusoidal") else {})
    # max_length caps prompt + new tokens at the trained context (GPT2LMHeadModel has no position past it).
    # stop=False (a character model, whose eos is the newline): no eos_token_id, as zoo's generate.py.
    ids = {k: v for k, v in token_ids.items() if v is not None and (stop or k != "eos_token_id")}
    return {**ids, **SAMPLING_DEFAULTS, "max_length": context}


PIL_BILINEAR = 2  # PIL.Image.Resampling.BILINEAR, as transformers stores it


def save_image_processor(
    directory: str | Path, *, image_size: int, mean: list[float], std: list[float], channels: int
) -> None:
    """preprocessor_config.json: ViTImageProcessor resizes to image_size, rescales by 1/255 and normalizes, as zoo's
    data does (the resize is the identity for MNIST and CIFAR-10 at their native size)."""
    if len(mean) != channels or len(std) != channels:
        raise ValueError(
            f"image_mean {mean} / image_std {std} do not have one value per channel of the model ({channels} channels)"
        )
    config = {
        "image_processor_type": "ViTImageProcessor",
        "do_resize": True,
        "size": {"height": image_size, "width": image_size},
        "resample": PIL_BILINEAR,
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "image_mean": [float(v) for v in mean],
        "image_std": [float(v) for v in std],
    }
    if channels == 3:
        config["do_convert_rgb"] = True  # grayscale or RGBA pictures become the 3 channels the model expects
    path = Path(directory) / "preprocessor_config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


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


def export_hf(
    model: ZooModel,
    directory: str | Path,
    *,
    tokenizer_json: str | None = None,
    labels: list[str] | None = None,
    image_mean: list[float] | None = None,
    image_std: list[float] | None = None,
    context_length: int | None = None,
    run: TrainingRun | None = None,
) -> list[str]:
    """Write `model` and what it was trained with as a Hugging Face directory; returns the file names written.

    tokenizer_json: the zoo tokenizer of a GPT, BERT or Transformer (a checkpoint's "zoo" section stores it); one
        with separate source and target vocabularies goes along with its own tokenizer class (trust_remote_code=True).
    labels: class names of a BERT classifier or a ViT, in class-id order.
    image_mean / image_std: the normalization a ViT was trained with, for preprocessor_config.json.
    context_length: the longest input the model was trained on (default: from `run`'s data, else the model's
        positions); the tokenizer's model_max_length and GPT's generation max_length.
    run: how the model was trained, for the model card (README.md); zoo-export reads it from the run directory.
    A grayscale ViT is written as the equivalent 3-channel model; a model that no native Hugging Face class computes
    with its own modelling code (trust_remote_code=True)."""
    check_exportable(model)
    context = _context(model, context_length, run)
    if tokenizer_json is not None and model.reads != "text":
        raise ValueError(f"a tokenizer was given for a {type(model).__name__}, which reads no text")
    if (image_mean is None) != (image_std is None):
        raise ValueError("give both image_mean and image_std (the normalization the ViT was trained with), or neither")
    if image_mean is not None and model.reads != "images":
        raise ValueError(f"image_mean/image_std were given for a {type(model).__name__}, which reads no images")
    if labels is not None:
        label_maps(labels, model.num_classes())  # checked before anything is written
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    token_ids: dict[str, int | None] = {}
    if tokenizer_json is not None:
        token_ids = save_tokenizer(tokenizer_json, directory, model_max_length=context)
    trained = model  # the card describes the model as trained (a grayscale ViT stays 1-channel there)
    if isinstance(model, ViT) and model.config.in_channels == 1:
        model = rgb_from_grayscale(model)
        image_mean = None if image_mean is None else list(image_mean) * 3
        image_std = None if image_std is None else list(image_std) * 3
    if is_native(model):
        save_hf(model, directory, labels=labels, token_ids=token_ids)
    else:  # a lab switch: the model's own code goes along (trust_remote_code=True)
        save_remote(model, directory, labels=labels, token_ids=token_ids)
    if model.pipeline_tag() in ("text-generation", "translation"):
        char = tokenizer_json is not None and json.loads(tokenizer_json).get("kind") == "char"
        config = _generation_config(model, token_ids, context, stop=not char)
        (directory / "generation_config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    if image_mean is not None:
        c = model.config
        save_image_processor(directory, image_size=c.image_size, mean=image_mean, std=image_std, channels=c.in_channels)
    write_model_card(directory, trained, fmt="hf", context=context, run=run, labels=labels)
    return sorted(p.name for p in directory.iterdir() if p.name in EXPORT_FILES)


def _context(model: ZooModel, context_length: int | None, run: TrainingRun | None) -> int | None:
    positions = model.positions()
    if context_length is None:
        return trained_context(model, run.data if run else None)
    if positions is None:
        raise ValueError(f"context_length was given for a {type(model).__name__}, which reads no token sequence")
    if not 0 < context_length <= positions:
        raise ValueError(f"context_length must be in 1..{positions} (the model's positions), got {context_length}")
    return context_length
