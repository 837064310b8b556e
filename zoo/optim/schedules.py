"""Learning-rate schedules with a linear warm-up (`_partial_: true` in YAML): warm-up + cosine, warm-up / stable /
decay, and a schedule run twice (`restarted_schedule`). Their shared arguments are checked in `_check_schedule`."""

from __future__ import annotations

import logging
import math

import torch
from lightning.pytorch.utilities import rank_zero_only
from torch.optim.lr_scheduler import LambdaLR, LRScheduler, SequentialLR

from .build import _is_number

log = logging.getLogger(__name__)


def _check_schedule(what: str, warmup_steps: int, max_steps: int, min_lr_ratio: float) -> None:
    """The arguments every warm-up schedule shares. A warm-up as long as the run is warned about, not refused (a
    smoke run is one)."""
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
    """Warm-up / stable / decay (WSD; Hu et al. 2024, Hägele et al. 2024): the peak after the warm-up until the last
    round(decay_fraction x max_steps) steps (at least one), then a linear decay to `min_lr_ratio` x the peak; the
    lower factor wins where the warm-up runs into the decay. A run can branch off a longer one and decay there."""
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
    """The schedule of `factory` twice, from step 0 and again from restart_step (e.g. pretraining, then fine-tuning);
    its `max_steps` is cut at restart_step for the first run, the rest for the second."""
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
