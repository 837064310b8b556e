"""Optimizer parameter groups and learning-rate schedules, configured from YAML with `_partial_: true`."""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Sequence

import torch
from lightning.pytorch.utilities import rank_zero_only
from torch import nn
from torch.optim.lr_scheduler import LambdaLR, LRScheduler, SequentialLR

log = logging.getLogger(__name__)


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Decay the matrices (linear and embedding weights); never decay biases and norm scales (1-D tensors), nor
    the tensors the model lists in `no_weight_decay()` (timm's convention: ViT's class token and positions)."""
    skip = set(model.no_weight_decay()) if hasattr(model, "no_weight_decay") else set()
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if param.requires_grad:
            (no_decay if param.dim() < 2 or name in skip else decay).append(param)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def layer_decay_groups(model: nn.Module, weight_decay: float, layer_decay: float) -> list[dict]:
    """Layer-wise lr decay (BEiT / MAE fine-tuning): with `model.layer_index(name)` numbering the depth from 0
    (embeddings) to L + 1 (the head), a tensor at depth d trains at lr * layer_decay^(L + 1 - d). One group per
    (depth, decays) carrying its `lr_scale`, which the task multiplies into the group's lr."""
    if not 0.0 < layer_decay <= 1.0:
        raise ValueError(f"layer_decay must be in (0, 1] (or null for none), got {layer_decay}")
    if not hasattr(model, "layer_index"):
        raise ValueError(f"layer_decay needs a model that numbers its layers; {type(model).__name__} does not")
    skip = set(model.no_weight_decay()) if hasattr(model, "no_weight_decay") else set()
    names = [name for name, _ in model.named_parameters()]
    top = max(model.layer_index(name) for name in names)
    groups: dict[tuple[int, bool], dict] = {}
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        no_decay = param.dim() < 2 or name in skip
        depth = model.layer_index(name)
        group = groups.setdefault(
            (depth, no_decay),
            {
                "params": [],
                "weight_decay": 0.0 if no_decay else weight_decay,
                "lr_scale": layer_decay ** (top - depth),
            },
        )
        group["params"].append(param)
    return list(groups.values())


def build_optimizer(factory, params, trainer=None, model: nn.Module | None = None) -> torch.optim.Optimizer:
    """Complete an optimizer partial. An optimizer whose constructor takes `model` (e.g. MuonWithAdamW, which
    must know the network's block matrices) is given the network. Lightning refuses gradient clipping with a
    fused optimizer under *-mixed precision (it assumes a grad scaler unscales inside step()), so there the
    fused kernel is swapped for the foreach one, with a message; fp32 and bf16-true keep it."""
    keywords = dict(getattr(factory, "keywords", {}))
    extra = {"model": model} if model is not None and _takes_model(factory) else {}
    lr = keywords.get("lr")
    # torch says only "Invalid learning rate: -1"; the config key is what the user can change.
    if lr is not None and (isinstance(lr, bool) or not isinstance(lr, (int, float)) or not lr > 0):
        raise ValueError(f"model.optimizer.lr must be positive, got {lr!r}")
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
    """Adam's (beta1, beta2). torch indexes them before it checks them: `betas=[0.9]` was an IndexError from inside
    AdamW (and MuonWithAdamW, which hands them on), naming no key."""
    # Any sequence: a YAML list reaches here as an OmegaConf ListConfig when the config is instantiated without
    # conversion.
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


def _check_schedule(what: str, warmup_steps: int, max_steps: int, min_lr_ratio: float) -> None:
    """The arguments every warm-up schedule shares, in one-line errors naming the config key. A warm-up as long as
    the run or longer is warned about, not refused: a smoke run (trainer.max_steps=5 with a recipe's warm-up) is
    one, and the schedules hand over to their decay without a jump."""
    for key, value, integer in (
        ("warmup_steps", warmup_steps, True),
        ("max_steps", max_steps, True),
        ("min_lr_ratio", min_lr_ratio, False),
    ):
        if not _is_number(value) or (integer and not isinstance(value, int)):
            kind = "an integer" if integer else "a number"
            raise ValueError(f"model.scheduler.{key} must be {kind}, got {value!r}")
    if warmup_steps < 0:
        raise ValueError(f"model.scheduler.warmup_steps must be >= 0, got {warmup_steps}")
    if max_steps <= 0:
        raise ValueError(
            f"{what} model.scheduler.max_steps (trainer.max_steps by default), which must be > 0, got {max_steps}; "
            "set trainer.max_steps"
        )
    if not 0.0 <= min_lr_ratio <= 1.0:
        raise ValueError(f"model.scheduler.min_lr_ratio must be in [0, 1], got {min_lr_ratio}")
    if warmup_steps >= max_steps:
        _warn(
            f"model.scheduler.warmup_steps={warmup_steps} >= the schedule's max_steps={max_steps} (trainer.max_steps "
            f"by default): the learning rate never reaches its peak; lower model.scheduler.warmup_steps below "
            f"{max_steps} unless this is a short smoke run"
        )


@rank_zero_only
def _warn(message: str) -> None:
    # A logged warning is one line ("WARNING: ..." under train.py); warnings.warn would add the source line.
    log.warning(message)


def _warmup(step: int, warmup_steps: int) -> float:
    """Linear warm-up that never gives the first update lr 0 (LambdaLR counts steps from 0)."""
    return (step + 1) / (warmup_steps + 1)


def warmup_cosine(
    optimizer: torch.optim.Optimizer, *, warmup_steps: int, max_steps: int, min_lr_ratio: float = 0.1
) -> LambdaLR:
    """Linear warm-up over `warmup_steps`, then cosine decay to `min_lr_ratio` x the peak at `max_steps`,
    constant after that (nanoGPT's schedule)."""
    _check_schedule("the cosine schedule decays over", warmup_steps, max_steps, min_lr_ratio)

    def factor(step: int) -> float:
        if step < warmup_steps:
            return _warmup(step, warmup_steps)
        if step >= max_steps:
            return min_lr_ratio
        progress = (step - warmup_steps) / max(1, max_steps - warmup_steps)
        return min_lr_ratio + 0.5 * (1.0 + math.cos(math.pi * progress)) * (1.0 - min_lr_ratio)

    return LambdaLR(optimizer, factor)


def warmup_stable_decay(
    optimizer: torch.optim.Optimizer,
    *,
    warmup_steps: int,
    max_steps: int,
    decay_fraction: float = 0.2,
    min_lr_ratio: float = 0.0,
) -> LambdaLR:
    """Warm-up / stable / decay (WSD; Hu et al. 2024 "MiniCPM", Hägele et al. 2024): linear warm-up over
    `warmup_steps` as in warmup_cosine, the peak until the last round(decay_fraction x max_steps) steps (at
    least one), a linear decay over those to `min_lr_ratio` x the peak at `max_steps`, constant after that.
    Where the warm-up runs into the decay the lower factor wins. The stable phase does not depend on the run's
    length, so a run can branch off a longer one's checkpoint and decay there."""
    _check_schedule("the WSD schedule decays before", warmup_steps, max_steps, min_lr_ratio)
    if not _is_number(decay_fraction) or not 0.0 < decay_fraction <= 1.0:
        raise ValueError(f"model.scheduler.decay_fraction must be in (0, 1], got {decay_fraction!r}")
    decay_steps = max(1, round(decay_fraction * max_steps))

    def factor(step: int) -> float:
        if step >= max_steps:
            return min_lr_ratio
        warmup = _warmup(step, warmup_steps) if step < warmup_steps else 1.0
        decay = min_lr_ratio + (1.0 - min_lr_ratio) * (max_steps - step) / decay_steps
        # The lower of the two: a warm-up that runs into the decay (a short smoke run) hands over without a jump.
        return min(warmup, decay)

    return LambdaLR(optimizer, factor)


def restarted_schedule(factory, optimizer: torch.optim.Optimizer, restart_step: int, *, what: str) -> LRScheduler:
    """The schedule of `factory` twice: over steps [0, restart_step) and again from restart_step, as two runs
    would have it (e.g. pretraining, then fine-tuning with its own warm-up and decay). A schedule with a
    `max_steps` keyword ends the first run at restart_step and the second at the original max_steps."""
    total = getattr(factory, "keywords", {}).get("max_steps")
    if total is None:
        first, second = factory(optimizer), factory(optimizer)
    else:
        if not 0 < restart_step < total:
            raise ValueError(
                f"{what} ({restart_step}) must be between 0 and the schedule's max_steps ({total}, "
                "trainer.max_steps by default): the steps after it are the second phase"
            )
        first = factory(optimizer, max_steps=restart_step)
        second = factory(optimizer, max_steps=total - restart_step)
    return SequentialLR(optimizer, [first, second], milestones=[restart_step])
