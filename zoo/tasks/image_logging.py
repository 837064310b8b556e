"""Pictures for image classifiers: a confusion matrix and attention-rollout overlays, drawn with PIL (no plotting
library needed) and sent to whichever loggers the trainer has."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from lightning.pytorch.loggers import CSVLogger, Logger, TensorBoardLogger, WandbLogger
from PIL import Image, ImageDraw, ImageFont

# Anchor colours of a perceptually ordered dark-to-bright map (close to matplotlib's "inferno").
_INFERNO = torch.tensor([(0, 0, 4), (87, 16, 110), (188, 55, 84), (249, 142, 9), (252, 255, 164)], dtype=torch.float32)


def log_image(loggers: list[Logger], key: str, image: Image.Image, step: int) -> None:
    for logger in loggers:
        if isinstance(logger, TensorBoardLogger):
            logger.experiment.add_image(key, np.asarray(image.convert("RGB")), global_step=step, dataformats="HWC")
        elif isinstance(logger, WandbLogger):
            logger.log_image(key=key, images=[image], step=step)
        elif isinstance(logger, CSVLogger):
            folder = Path(logger.log_dir) / "images"
            folder.mkdir(parents=True, exist_ok=True)
            image.save(folder / f"{key.replace('/', '_')}_step{step:06d}.png")


def colormap(values: torch.Tensor) -> torch.Tensor:
    """values in [0, 1], any shape -> uint8 RGB with a trailing channel dimension."""
    x = values.clamp(0, 1) * (len(_INFERNO) - 1)
    low = x.floor().long().clamp(max=len(_INFERNO) - 2)
    frac = (x - low)[..., None]
    return (_INFERNO[low] * (1 - frac) + _INFERNO[low + 1] * frac).round().to(torch.uint8)


# ---- confusion matrix -------------------------------------------------------------------------------------------
def confusion_matrix_image(matrix: torch.Tensor, class_names: list[str] | None = None,
                           title: str = "confusion matrix") -> Image.Image:
    """Rows are true classes, columns predictions. Cells are shaded by the row-normalized rate (so rare classes
    show as clearly as common ones) and, when there is room, labelled with their counts."""
    matrix = matrix.detach().cpu().long()
    n = matrix.shape[0]
    names = class_names if class_names and len(class_names) == n else [str(i) for i in range(n)]
    cell = max(2, min(40, 720 // n))
    labelled = cell >= 16
    font = ImageFont.load_default()
    margin = (max(len(s) for s in names) * 7 + 12) if labelled else 8
    top = 28 + (margin if labelled else 0)
    width, height = margin + n * cell + 8, top + n * cell + 8
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    draw.text((6, 6), f"{title} (rows: true, columns: predicted; accuracy "
                      f"{matrix.diag().sum().item() / max(1, matrix.sum().item()):.1%})", fill="black", font=font)
    rates = matrix.float() / matrix.sum(dim=1, keepdim=True).clamp(min=1)
    shade = (255 - rates * 215).round().long()  # white -> dark blue
    for i in range(n):
        for j in range(n):
            x0, y0 = margin + j * cell, top + i * cell
            s = int(shade[i, j])
            draw.rectangle([x0, y0, x0 + cell - 1, y0 + cell - 1], fill=(s, s + (255 - s) // 3, 255),
                           outline=(230, 230, 230) if labelled else None)
            if labelled and matrix[i, j] > 0:
                draw.text((x0 + 3, y0 + cell // 2 - 5), str(int(matrix[i, j])),
                          fill="white" if rates[i, j] > 0.5 else "black", font=font)
    if labelled:
        for k, name in enumerate(names):
            draw.text((4, top + k * cell + cell // 2 - 5), name, fill="black", font=font)
            # Column labels are written upwards in a strip above the matrix.
            strip = Image.new("RGB", (margin, cell), "white")
            ImageDraw.Draw(strip).text((4, cell // 2 - 5), name, fill="black", font=font)
            image.paste(strip.rotate(90, expand=True), (margin + k * cell, 28))
    return image


# ---- attention rollout ----------------------------------------------------------------------------------------
def attention_rollout(maps: list[torch.Tensor], num_prefix: int, grid: tuple[int, int], *,
                      from_class_token: bool = True) -> torch.Tensor:
    """Abnar & Zuidema (2020): average the heads, add the residual path (0.5 A + 0.5 I), renormalize and multiply
    through the layers; the class token's row (or, for a model that pools the patches, their mean row) says how
    much each patch flowed into the output. maps: per layer (B, H, T, T) -> (B, gh, gw) in [0, 1]."""
    b, _, t, _ = maps[0].shape
    eye = torch.eye(t, device=maps[0].device)
    flow = eye.expand(b, t, t)
    for attn in maps:
        a = 0.5 * attn.float().mean(dim=1) + 0.5 * eye
        a = a / a.sum(dim=-1, keepdim=True)
        flow = a @ flow
    if from_class_token and num_prefix:
        rows = flow[:, 0, num_prefix:]
    else:
        rows = flow[:, num_prefix:, num_prefix:].mean(dim=1)
    heat = rows.reshape(b, *grid)
    low = heat.flatten(1).min(1).values[:, None, None]
    high = heat.flatten(1).max(1).values[:, None, None]
    return (heat - low) / (high - low).clamp(min=1e-12)


def rollout_image(images: torch.Tensor, heat: torch.Tensor, *, mean, std, labels=None, predictions=None,
                  class_names: list[str] | None = None, scale_to: int = 112) -> Image.Image:
    """One row per image: the image, and the image with the rollout heat map laid over it."""
    images = images.detach().float().cpu()
    mean = torch.tensor(mean, dtype=torch.float32)[:, None, None]
    std = torch.tensor(std, dtype=torch.float32)[:, None, None]
    pixels = (images * std + mean).clamp(0, 1)
    if pixels.shape[1] == 1:
        pixels = pixels.expand(-1, 3, -1, -1)
    size = max(scale_to, pixels.shape[-1])
    pixels = F.interpolate(pixels, size=(size, size), mode="nearest")
    heat = F.interpolate(heat[:, None].float().cpu(), size=(size, size), mode="bilinear", align_corners=False)[:, 0]
    overlay = 0.45 * pixels + 0.55 * colormap(heat).permute(0, 3, 1, 2).float() / 255
    font = ImageFont.load_default()
    caption = 14
    canvas = Image.new("RGB", (2 * size + 12, len(images) * (size + caption + 4) + 4), "white")
    draw = ImageDraw.Draw(canvas)
    for i in range(len(images)):
        y = 4 + i * (size + caption + 4)
        for k, panel in enumerate((pixels[i], overlay[i])):
            array = (panel.permute(1, 2, 0).numpy() * 255).round().astype(np.uint8)
            canvas.paste(Image.fromarray(array), (4 + k * (size + 4), y))
        if labels is not None and predictions is not None:
            name = (lambda c: class_names[c] if class_names else str(c))
            draw.text((4, y + size + 1), f"true {name(int(labels[i]))}, predicted {name(int(predictions[i]))}",
                      fill="black", font=font)
    return canvas
