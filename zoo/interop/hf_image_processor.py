"""preprocessor_config.json for an exported ViT: the resize, scaling and normalization zoo's data applied.

zoo feeds a ViT `ToDtype(float32, scale=True)` (pixels / 255) then `Normalize(mean, std)` at the model's image size;
ViTImageProcessor does the same: resize to image_size x image_size, rescale by 1/255, normalize. For MNIST and
CIFAR-10 at their native size the resize is the identity, so the processor gives zoo's inputs exactly; images of
other sizes are resized bilinearly (zoo's ImageFolder evaluation resizes the short side and center-crops instead).
"""

from __future__ import annotations

import json
from pathlib import Path

PIL_BILINEAR = 2  # PIL.Image.Resampling.BILINEAR, as transformers stores it


def save_image_processor(
    directory: str | Path, *, image_size: int, mean: list[float], std: list[float], channels: int
) -> None:
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
