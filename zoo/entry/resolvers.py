"""OmegaConf resolvers used by the YAML configs; registered when zoo.entry is imported."""

from __future__ import annotations

import netrc
import os

from omegaconf import OmegaConf


def wandb_offline() -> bool:
    """True unless an API key is available (WANDB_API_KEY or a `wandb login` entry in ~/.netrc), so that runs
    without credentials log to a local offline run instead of stopping at a login prompt."""
    if os.environ.get("WANDB_MODE") in ("offline", "disabled"):
        return True
    if os.environ.get("WANDB_API_KEY"):
        return False
    try:
        return netrc.netrc().authenticators("api.wandb.ai") is None
    except (FileNotFoundError, netrc.NetrcParseError):
        return True


def register() -> None:
    if not OmegaConf.has_resolver("zoo.wandb_offline"):
        OmegaConf.register_new_resolver("zoo.wandb_offline", wandb_offline)
