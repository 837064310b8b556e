"""Optimizer parameter groups and learning-rate schedules, configured from YAML with `_partial_: true`."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Decay the matrices (linear and embedding weights); never decay biases and norm scales (1-D tensors)."""
    decay, no_decay = [], []
    for param in model.parameters():
        if param.requires_grad:
            (decay if param.dim() >= 2 else no_decay).append(param)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def build_optimizer(factory, params, trainer=None) -> torch.optim.Optimizer:
    """Complete an optimizer partial. Lightning refuses gradient clipping with a fused optimizer under *-mixed
    precision (it assumes a grad scaler unscales inside step()), so there the fused kernel is swapped for the
    foreach one, with a message; fp32 and bf16-true keep it."""
    keywords = dict(getattr(factory, "keywords", {}))
    if keywords.get("fused") and trainer is not None:
        mixed = str(trainer.precision).endswith("-mixed")
        if mixed and (trainer.gradient_clip_val or 0) > 0:
            from lightning.pytorch.utilities import rank_zero_info

            rank_zero_info("fused optimizer + gradient clipping is refused by Lightning under mixed precision; "
                           "using the foreach implementation instead")
            return factory(params, fused=False)
    return factory(params)


def warmup_cosine(
    optimizer: torch.optim.Optimizer, *, warmup_steps: int, max_steps: int, min_lr_ratio: float = 0.1
) -> LambdaLR:
    """Linear warm-up over `warmup_steps`, then cosine decay to `min_lr_ratio` x the peak at `max_steps`,
    constant after that (nanoGPT's schedule)."""
    if warmup_steps < 0 or max_steps <= 0:
        raise ValueError(f"need warmup_steps >= 0 (got {warmup_steps}) and max_steps > 0 (got {max_steps})")
    if not 0.0 <= min_lr_ratio <= 1.0:
        raise ValueError(f"min_lr_ratio must be in [0, 1], got {min_lr_ratio}")

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / (warmup_steps + 1)
        if step >= max_steps:
            return min_lr_ratio
        progress = (step - warmup_steps) / max(1, max_steps - warmup_steps)
        return min_lr_ratio + 0.5 * (1.0 + math.cos(math.pi * progress)) * (1.0 - min_lr_ratio)

    return LambdaLR(optimizer, factor)
