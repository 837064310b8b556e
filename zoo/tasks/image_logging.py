"""Pictures for image classifiers, sent to whichever loggers the trainer has: the confusion matrix (torchmetrics'
matplotlib plot) and attention-rollout overlays (image grids, composed with PIL)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from lightning.pytorch.loggers import CSVLogger, Logger, TensorBoardLogger, WandbLogger
from matplotlib import pyplot as plt
from matplotlib.figure import Figure
from PIL import Image, ImageDraw, ImageFont
from torchmetrics.classification import MulticlassConfusionMatrix


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


def log_figure(loggers: list[Logger], key: str, figure: Figure, step: int) -> None:
    """A matplotlib figure, rendered once to a PNG, then logged like any picture; the figure is closed."""
    buffer = io.BytesIO()
    try:
        figure.savefig(buffer, format="png", dpi=100)
    finally:
        plt.close(figure)  # pyplot keeps every open figure alive; one per validation would add up
    buffer.seek(0)
    log_image(loggers, key, Image.open(buffer).convert("RGB"), step)


# ---- confusion matrix -------------------------------------------------------------------------------------------
def confusion_matrix_figure(
    matrix: torch.Tensor, class_names: list[str] | None = None, title: str = "confusion matrix"
) -> Figure:
    """Rows are true classes, columns predictions (torchmetrics' plot), titled with the accuracy. Counts are
    written in the cells and classes named on the axes while there is room for them."""
    matrix = matrix.detach().cpu()
    n = matrix.shape[0]
    names = class_names if class_names and len(class_names) == n else None
    side = min(12.0, 3.0 + 0.4 * n)  # inches: readable for 10 classes, bounded for 1000
    figure, ax = plt.subplots(figsize=(side, side), constrained_layout=True)
    MulticlassConfusionMatrix(num_classes=n).plot(val=matrix, ax=ax, add_text=n <= 20, labels=names)
    if n > 30:  # one tick per class would be an unreadable smear
        ax.set_xticks([])
        ax.set_yticks([])
    accuracy = matrix.diag().sum().item() / max(1, matrix.sum().item())
    ax.set_title(f"{title} (accuracy {accuracy:.1%})")
    return figure


# ---- attention rollout ----------------------------------------------------------------------------------------
def attention_rollout(
    maps: list[torch.Tensor], num_prefix: int, grid: tuple[int, int], *, from_class_token: bool = True
) -> torch.Tensor:
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


def rollout_image(
    images: torch.Tensor,
    heat: torch.Tensor,
    *,
    mean,
    std,
    labels=None,
    predictions=None,
    class_names: list[str] | None = None,
    scale_to: int = 112,
) -> Image.Image:
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
    colours = torch.from_numpy(plt.get_cmap("inferno")(heat.clamp(0, 1).numpy())[..., :3]).float()  # dark to bright
    overlay = 0.45 * pixels + 0.55 * colours.permute(0, 3, 1, 2)
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
            name = lambda c: class_names[c] if class_names else str(c)
            draw.text(
                (4, y + size + 1),
                f"true {name(int(labels[i]))}, predicted {name(int(predictions[i]))}",
                fill="black",
                font=font,
            )
    return canvas
