"""After Hydra rejects an override of a key that does not exist, name the nearest existing key: only then (a normal
start pays nothing) the config is composed again without the bad override. A key whose value is `???` exists.
"""

from __future__ import annotations

import contextlib
import difflib
import re
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from zoo.entry.errors import hydra_errors_in_one_line

CONF = Path(__file__).resolve().parents[1] / "conf"


def dotted_keys(cfg: DictConfig, prefix: str = "") -> list[str]:
    keys = []
    for key, value in cfg.items_ex(resolve=False):  # unresolved: ${hydra:...} cannot resolve outside a run
        path = f"{prefix}{key}"
        keys.append(path)
        if isinstance(value, DictConfig):
            keys += dotted_keys(value, path + ".")
    return keys


def has_key(cfg: DictConfig, key: str) -> bool:
    """Whether the dotted `key` exists, whatever its value (OmegaConf.select treats `???` as absent)."""
    parent_key, _, last = key.rpartition(".")
    parent = OmegaConf.select(cfg, parent_key, default=None, throw_on_missing=False) if parent_key else cfg
    return isinstance(parent, DictConfig) and last in parent


def nearest_key(config_name: str, overrides: list[str]) -> tuple[str, str] | None:
    """(bad key, suggestion) for the first override whose key the composed config lacks."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    plain = [o for o in overrides if not o.startswith(("-", "hydra.", "hydra/", "+", "~"))]
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        for i, override in enumerate(plain):
            key = re.split(r"[=:]", override, maxsplit=1)[0]
            if "." not in key and "/" not in key:
                continue  # a group choice such as model=gpt: Hydra already lists the options
            try:
                cfg = compose(config_name=config_name, overrides=plain[:i] + plain[i + 1 :])
            except Exception:  # another override is the broken one
                continue
            if not has_key(cfg, key):
                close = difflib.get_close_matches(key, dotted_keys(cfg), n=1, cutoff=0.6)
                return (key, close[0]) if close else None
    return None


def print_hint(config_name: str) -> None:
    with contextlib.suppress(Exception):
        found = nearest_key(config_name, sys.argv[1:])
        if found:
            print(f"hint: there is no key '{found[0]}'; did you mean '{found[1]}'?", file=sys.stderr)


def suggest_nearest_key(config_name: str):
    """Around a `@hydra.main` call: every failure in one line (zoo.entry.errors), a rejected override with a hint."""
    return hydra_errors_in_one_line(on_config_error=lambda: print_hint(config_name))
