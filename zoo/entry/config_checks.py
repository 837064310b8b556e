"""Checks of the composed config's values before anything is built, so that a wrong type or range is reported
in one line naming the key (instead of surfacing later as an error deep inside Lightning or torch)."""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf


def _integer(cfg: DictConfig, key: str, *, minimum: int | None = None) -> None:
    value = OmegaConf.select(cfg, key, default=None)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{key} must be an integer, got {value!r}; e.g. {key}=1")
    if minimum is not None and value < minimum:
        raise ValueError(f"{key} must be >= {minimum}, got {value}")


def check_config(cfg: DictConfig) -> None:
    _integer(cfg, "seed")
