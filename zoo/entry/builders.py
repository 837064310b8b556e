"""Small pieces shared by the entry points: loggers, callbacks, the model's vocabulary from the data."""

from __future__ import annotations

import hydra
from lightning.pytorch import Callback
from lightning.pytorch.callbacks import LearningRateMonitor
from lightning.pytorch.loggers import Logger
from omegaconf import DictConfig, OmegaConf


def build_model_config(net_cfg: DictConfig, datamodule) -> DictConfig:
    """The model's config completed from the data: every field in `datamodule.model_fields` (vocab_size from a
    tokenizer, num_classes / image_size / in_channels from an image dataset, ...) that the config leaves null
    is filled in; one that is set must agree (a vocabulary may be larger than the tokenizer's, never smaller)."""
    net_cfg = net_cfg.copy()
    OmegaConf.set_struct(net_cfg, False)
    for field, value in getattr(datamodule, "model_fields", {}).items():
        given = net_cfg.get(field)
        if given is None:
            net_cfg[field] = value
        elif field == "vocab_size" and given < value:
            raise ValueError(
                f"model.net.vocab_size={given} is smaller than the tokenizer's {value} tokens; "
                "remove the override or raise it"
            )
        elif field != "vocab_size" and given != value:
            raise ValueError(f"model.net.{field}={given} does not match the data, which has {field}={value}")
    return net_cfg


def task_inputs(datamodule) -> dict:
    """What a task needs from its data besides batches (e.g. the tokenizer, to decode samples)."""
    return dict(getattr(datamodule, "task_inputs", {}))


def build_callbacks(cfg: DictConfig | None, *, has_logger: bool = True) -> list[Callback]:
    """The configured callbacks. Without any logger (`logger=none`) the learning-rate monitor has nowhere to write
    and Lightning refuses to start, so it is left out: that is what `logger=none` asks for."""
    if not cfg:
        return []
    callbacks = [hydra.utils.instantiate(c) for c in cfg.values() if c is not None and "_target_" in c]
    if not has_logger:
        callbacks = [c for c in callbacks if not isinstance(c, LearningRateMonitor)]
    return callbacks


def build_loggers(cfg: DictConfig | None) -> list[Logger]:
    if not cfg:
        return []
    return [hydra.utils.instantiate(c) for c in cfg.values() if c is not None and "_target_" in c]
