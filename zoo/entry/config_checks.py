"""Checks of the composed config's values before anything is built: a wrong type or range is one line naming the key,
not an error deep inside Lightning or torch ("'<' not supported between 'str' and 'int'" for trainer.max_steps=abc).
"""

from __future__ import annotations

import math
import re

from omegaconf import DictConfig, ListConfig, OmegaConf

from zoo.optim.build import check_betas
from zoo.strategies.fsdp import check_optimizer_for_sharding

# Trainer options that take a whole number, with their smallest allowed value (-1: "no limit" for Lightning).
TRAINER_INTEGERS = {
    "max_steps": -1,
    "min_steps": 0,
    "max_epochs": -1,
    "min_epochs": 0,
    "accumulate_grad_batches": 1,
    "log_every_n_steps": 1,
    "check_val_every_n_epoch": 1,
    "num_sanity_val_steps": -1,
    "num_nodes": 1,
}
# Options that take a count of batches (an integer) or a fraction of the batches (a float in [0, 1]).
TRAINER_BATCH_LIMITS = ("limit_train_batches", "limit_val_batches", "limit_test_batches", "limit_predict_batches")
DURATION = re.compile(r"\d+:\d+:\d+:\d+")


def _is_integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _integer(cfg: DictConfig, key: str, *, minimum: int | None = None) -> None:
    value = OmegaConf.select(cfg, key, default=None)
    if value is not None and not _is_integer(value):
        raise ValueError(f"{key} must be an integer, got {value!r}; e.g. {key}=1")
    if value is not None and minimum is not None and value < minimum:
        raise ValueError(f"{key} must be >= {minimum}, got {value}")


def _batches(cfg: DictConfig, key: str, *, at_least_one: bool = False, duration_ok: bool = False) -> None:
    """An integer count of batches or a float fraction of them (Lightning's limit_* and val_check_interval);
    `duration_ok`: also a time "DD:HH:MM:SS" or a mapping of units (which Lightning checks)."""
    value = OmegaConf.select(cfg, key, default=None)
    if value is None or (duration_ok and (isinstance(value, DictConfig) or DURATION.fullmatch(str(value)))):
        return
    low, bounds = (1, "(0, 1]") if at_least_one else (0, "[0, 1]")
    if _is_integer(value):
        if value < low:
            raise ValueError(f"{key} must be >= {low} batches (or a fraction in {bounds}), got {value}")
        return
    if not (isinstance(value, float) and (0.0 < value <= 1.0 if at_least_one else 0.0 <= value <= 1.0)):
        duration = ", or a time DD:HH:MM:SS" if duration_ok else ""
        raise ValueError(
            f"{key} must be an integer (batches) or a fraction in {bounds}{duration}, got {value!r}; "
            f"e.g. {key}=10 or {key}=0.5"
        )


def _number(cfg: DictConfig, key: str, *, at_least_zero: bool = False) -> None:
    """A number (`at_least_zero`: finite and >= 0; else any, the schedule that takes it checks the range)."""
    value = OmegaConf.select(cfg, key, default=None)
    if value is None:
        return
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if at_least_zero and not (number and math.isfinite(value) and value >= 0):
        raise ValueError(f"{key} must be a number >= 0, got {value!r}")
    if not number:
        raise ValueError(f"{key} must be a number, got {value!r}")


def check_metric_is_logged(cfg: DictConfig) -> None:
    """Refuse, before training, a run whose `optimized_metric` (a val/ metric) can never be logged: validate=false
    skips the pass after fit and the run stops at trainer.max_steps before its first validation (e.g. the fast
    recipe, which validates at its step 300, shortened with trainer.max_steps=5)."""
    name = cfg.get("optimized_metric")
    if not name or not str(name).startswith("val/") or cfg.get("validate", True) or not cfg.get("train", True):
        return
    if cfg.get("measure") is not None or OmegaConf.select(cfg, "trainer.fast_dev_run", default=False):
        return  # a measurement job logs no val/ metric by design; fast_dev_run returns no metric
    trainer = cfg.get("trainer") or {}
    max_steps, interval = trainer.get("max_steps"), trainer.get("val_check_interval")
    fix = "or optimized_metric=train/loss (or null: no metric for a sweep)"
    if trainer.get("limit_val_batches") == 0:
        raise ValueError(
            f"optimized_metric={name} is never logged: trainer.limit_val_batches=0 runs no validation and "
            f"validate=false skips the pass after fit; set trainer.limit_val_batches, validate=true, {fix}"
        )
    if trainer.get("check_val_every_n_epoch") is not None or not (_is_integer(max_steps) and _is_integer(interval)):
        return  # epoch-based or time-based validation: not decidable here
    if 0 < max_steps < interval:
        raise ValueError(
            f"optimized_metric={name} is never logged: validation runs every trainer.val_check_interval={interval} "
            f"steps, which trainer.max_steps={max_steps} never reaches, and validate=false skips the pass after fit; "
            f"lower trainer.val_check_interval (e.g. trainer.val_check_interval={max_steps}), set validate=true, {fix}"
        )


def check_config(cfg: DictConfig) -> None:
    # The keys a config lists under `required` (experiment=gpt2_finetune: model.pretrained), which it cannot mark
    # ??? when a config it builds on sets them first (OmegaConf keeps an existing value over ???).
    for key in cfg.get("required") or ():
        if OmegaConf.select(cfg, key, default=None) is None:
            raise ValueError(
                f"{key} has no value, and {cfg.get('task_name')} needs one; give it on the command line: {key}=..."
            )
    _integer(cfg, "seed")
    for key, minimum in TRAINER_INTEGERS.items():
        _integer(cfg, f"trainer.{key}", minimum=minimum)
    for key in TRAINER_BATCH_LIMITS:
        _batches(cfg, f"trainer.{key}")
    _batches(cfg, "trainer.val_check_interval", at_least_one=True, duration_ok=True)
    # The data configs' sizes: a string here would fail later as "'<=' not supported between 'str' and 'int'".
    for key, minimum in (("batch_size", 1), ("eval_batch_size", 1), ("block_size", 1), ("num_workers", 0)):
        _integer(cfg, f"data.{key}", minimum=minimum)
    # 0 is a choice (no updates, a schedule's floor); < 0 is not.
    for key in ("trainer.gradient_clip_val", "model.optimizer.lr", "model.weight_decay"):
        _number(cfg, key, at_least_zero=True)
    betas = OmegaConf.select(cfg, "model.optimizer.betas", default=None)
    if betas is not None:
        check_betas(OmegaConf.to_container(betas) if isinstance(betas, ListConfig) else betas)
    _integer(cfg, "model.scheduler.warmup_steps", minimum=0)
    for key in ("decay_fraction", "min_lr_ratio"):
        _number(cfg, f"model.scheduler.{key}")
    check_metric_is_logged(cfg)
    # Muon under trainer=fsdp, refused before the processes are launched.
    strategy = OmegaConf.select(cfg, "trainer.strategy._target_", default=None)
    optimizer = OmegaConf.select(cfg, "model.optimizer._target_", default=None)
    if strategy == "zoo.strategies.fsdp.FSDP2Strategy" and optimizer is not None:
        check_optimizer_for_sharding(optimizer)
