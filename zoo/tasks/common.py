"""Pieces every task shares: the optimizer/scheduler set-up and the checkpoint's "zoo" section."""

from __future__ import annotations

import lightning as L

from .optim import build_optimizer, param_groups


def configure_optimizers(task: L.LightningModule, groups: list[dict] | None = None):
    """The task's optimizer partial over decay/no-decay groups (or `groups`), with its scheduler stepped per step."""
    if task.optimizer_factory is None:
        raise ValueError("this task was built without an optimizer (evaluation only); it cannot be trained")
    if groups is None:
        groups = param_groups(task.net, task.hparams.weight_decay)
    optimizer = build_optimizer(task.optimizer_factory, groups, task._trainer)
    if task.scheduler_factory is None:
        return optimizer
    scheduler = task.scheduler_factory(optimizer)
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def zoo_checkpoint_info(task: L.LightningModule, tokenizer=None, **extra) -> dict:
    """The "zoo" section of a checkpoint: enough to rebuild the model (and its tokenizer, class names...) without
    the config or the data folder."""
    datamodule = getattr(task.trainer, "datamodule", None) if task._trainer is not None else None
    return {
        "task": task.task_name,
        "datamodule": None if datamodule is None else f"{type(datamodule).__module__}.{type(datamodule).__qualname__}",
        "model_type": task.net.model_type,
        "model_config": task.net.config_dict(),
        "tokenizer": None if tokenizer is None else tokenizer.to_json(),
        **extra,
    }
