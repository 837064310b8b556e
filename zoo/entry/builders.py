"""Small pieces shared by the entry points: loggers, callbacks, the model's vocabulary from the data."""

from __future__ import annotations

import hydra
from lightning.pytorch import Callback
from lightning.pytorch.loggers import Logger
from omegaconf import DictConfig, OmegaConf


def build_model_config(net_cfg: DictConfig, datamodule) -> DictConfig:
    """The model's config with vocab_size filled in from the data's tokenizer (unless set explicitly)."""
    net_cfg = net_cfg.copy()
    tokenizer_vocab = getattr(datamodule, "vocab_size", None)
    if tokenizer_vocab is None:
        return net_cfg
    given = net_cfg.get("vocab_size")
    if given is None:
        OmegaConf.set_struct(net_cfg, False)
        net_cfg.vocab_size = tokenizer_vocab
    elif given < tokenizer_vocab:
        raise ValueError(
            f"model.net.vocab_size={given} is smaller than the tokenizer's {tokenizer_vocab} tokens; "
            "remove the override or raise it"
        )
    return net_cfg


def build_callbacks(cfg: DictConfig | None) -> list[Callback]:
    if not cfg:
        return []
    return [hydra.utils.instantiate(c) for c in cfg.values() if c is not None and "_target_" in c]


def build_loggers(cfg: DictConfig | None) -> list[Logger]:
    if not cfg:
        return []
    return [hydra.utils.instantiate(c) for c in cfg.values() if c is not None and "_target_" in c]
