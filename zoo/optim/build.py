"""Completing the optimizer partial a config gives into an optimizer over parameter groups: the network for an
optimizer that must see it (MuonWithAdamW), the trainer's precision and clipping for the fused kernel, and the lr and
betas checked first, in one-line errors naming their config keys."""

from __future__ import annotations

import inspect
import math
from collections.abc import Sequence

import torch
from torch import nn


def build_optimizer(factory, params, trainer=None, model: nn.Module | None = None) -> torch.optim.Optimizer:
    """Complete an optimizer partial, giving the network to one that takes `model`. Lightning refuses gradient
    clipping with a fused optimizer under *-mixed precision: there the foreach kernel is used, with a message."""
    keywords = dict(getattr(factory, "keywords", {}))
    extra = {"model": model} if model is not None and _takes_model(factory) else {}
    lr = keywords.get("lr")
    # lr=0 is allowed (no updates: measuring, evaluating with the training loop), as torch allows it.
    if lr is not None and (isinstance(lr, bool) or not isinstance(lr, (int, float)) or not lr >= 0):
        raise ValueError(f"model.optimizer.lr must be a number >= 0, got {lr!r}")
    if "betas" in keywords:
        check_betas(keywords["betas"])
    if keywords.get("fused") and trainer is not None:
        mixed = str(trainer.precision).endswith("-mixed")
        if mixed and (trainer.gradient_clip_val or 0) > 0:
            from lightning.pytorch.utilities import rank_zero_info

            rank_zero_info(
                "fused optimizer + gradient clipping is refused by Lightning under mixed precision; "
                "using the foreach implementation instead"
            )
            return factory(params, fused=False, **extra)
    return factory(params, **extra)


def check_betas(betas) -> None:
    """Adam's (beta1, beta2), any sequence (a ListConfig too): torch would fail with an IndexError naming no key."""
    pair = list(betas) if isinstance(betas, Sequence) and not isinstance(betas, str) else None
    if pair is None or len(pair) != 2 or not all(_is_number(b) and 0.0 <= b < 1.0 for b in pair):
        shown = pair if pair is not None else betas
        raise ValueError(
            f"model.optimizer.betas must be two numbers in [0, 1) (beta1, beta2), got {shown!r}; "
            "e.g. model.optimizer.betas=[0.9,0.95]"
        )


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _takes_model(factory) -> bool:
    try:
        return "model" in inspect.signature(factory).parameters
    except (TypeError, ValueError):  # a builtin without a signature
        return False
