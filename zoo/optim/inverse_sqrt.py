"""The learning-rate schedule of "Attention Is All You Need": linear warm-up, then decay with 1/sqrt(step). The
optimizer's lr is the paper's peak, d_model^-0.5 * warmup^-0.5 (base model: 7.0e-4); the shape is the paper's."""

from __future__ import annotations

import math

import torch
from torch.optim.lr_scheduler import LambdaLR


def warmup_inverse_sqrt(optimizer: torch.optim.Optimizer, *, warmup_steps: int, min_lr_ratio: float = 0.0) -> LambdaLR:
    """Factor of the peak lr at optimizer step s (counting from 1): s / warmup while warming up, then
    sqrt(warmup / s); never below `min_lr_ratio`."""
    if warmup_steps <= 0:
        raise ValueError(
            f"model.scheduler.warmup_steps must be positive for the inverse-square-root schedule, got {warmup_steps}"
        )
    if not 0.0 <= min_lr_ratio <= 1.0:
        raise ValueError(f"model.scheduler.min_lr_ratio must be in [0, 1], got {min_lr_ratio}")

    def factor(step: int) -> float:
        s = step + 1  # LambdaLR counts from 0; the first update should not have lr 0
        return max(min_lr_ratio, min(s / warmup_steps, math.sqrt(warmup_steps / s)))

    return LambdaLR(optimizer, factor)


def paper_peak_lr(d_model: int, warmup_steps: int) -> float:
    """The peak of the paper's schedule, d_model^-0.5 * warmup_steps^-0.5."""
    return d_model**-0.5 * warmup_steps**-0.5
