"""After Hydra rejects an override of a key that does not exist, name the nearest existing key.

Hydra prints its own error and exits; only then (so a normal start pays nothing) the config is composed once more
without the bad override, and the closest dotted key is suggested.
"""

from __future__ import annotations

import contextlib
import difflib
import re
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

CONF = Path(__file__).resolve().parents[1] / "conf"


def dotted_keys(cfg: DictConfig, prefix: str = "") -> list[str]:
    keys = []
    for key, value in cfg.items_ex(resolve=False):  # unresolved: ${hydra:...} cannot resolve outside a run
        path = f"{prefix}{key}"
        keys.append(path)
        if isinstance(value, DictConfig):
            keys += dotted_keys(value, path + ".")
    return keys


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
            if OmegaConf.select(cfg, key, default="<absent>") == "<absent>":
                close = difflib.get_close_matches(key, dotted_keys(cfg), n=1, cutoff=0.6)
                return (key, close[0]) if close else None
    return None


@contextlib.contextmanager
def suggest_nearest_key(config_name: str):
    try:
        yield
    except SystemExit as stop:
        if stop.code not in (0, None):
            with contextlib.suppress(Exception):
                found = nearest_key(config_name, sys.argv[1:])
                if found:
                    print(f"hint: there is no key '{found[0]}'; did you mean '{found[1]}'?", file=sys.stderr)
        raise
