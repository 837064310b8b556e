"""Optimizer and scheduler partials recorded in a checkpoint's hyper-parameters (`{"_target_": ..., "_partial_":
true, **keywords}`), and rebuilt from them. Rebuilding imports a name read from a file, so only torch.optim and
zoo.optim are trusted; the names checkpoints recorded before zoo.optim existed are translated first."""

from __future__ import annotations

import functools
from typing import Any

import torch
from hydra.utils import get_object

from zoo.optim.former_names import current_name

# Where a recorded scheduler may come from; optimizers must in addition be torch.optim.Optimizer subclasses.
_TRUSTED_MODULES = ("torch.optim.", "zoo.optim.")
_PLAIN = (str, int, float, bool, type(None))


def _is_plain(value: Any) -> bool:
    if isinstance(value, _PLAIN):
        return True
    if isinstance(value, (list, tuple)):
        return all(_is_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_plain(v) for k, v in value.items())
    return False


def describe_partial(factory) -> dict | None:
    """The recordable form of a partial, or None when it cannot be written down (a lambda, a local function,
    positional arguments, or keywords that are not plain data); such a task loads back without it."""
    if not isinstance(factory, functools.partial) or factory.args or not _is_plain(factory.keywords):
        return None
    target = f"{factory.func.__module__}.{factory.func.__qualname__}"
    if "<" in target or not target.startswith(_TRUSTED_MODULES):
        return None
    # Tuples become lists: the checkpoint's hyper-parameters then match a YAML-born config exactly.
    keywords = {k: list(v) if isinstance(v, tuple) else v for k, v in factory.keywords.items()}
    return {"_target_": target, "_partial_": True, **keywords}


def rebuild_partial(spec: dict | None, *, kind: str, source: str):
    """The partial a `describe_partial` record stands for; `kind`: "optimizer" or "scheduler"; `source`: the
    checkpoint path."""
    if spec is None:
        return None
    if not isinstance(spec, dict) or not isinstance(spec.get("_target_"), str) or not spec.get("_partial_"):
        raise ValueError(f"{source}: the recorded {kind} is not a partial ({spec!r}); pass {kind}=... explicitly")
    # Former names (zoo.tasks.muon...) are translated before the trust check, which then sees only zoo.optim.
    target = current_name(spec["_target_"])
    if not target.startswith(_TRUSTED_MODULES):
        raise ValueError(
            f"{source}: refusing to import the recorded {kind} '{target}' (only torch.optim and "
            f"zoo.optim are trusted); pass {kind}=... explicitly"
        )
    try:
        obj = get_object(target)
    except ImportError:
        raise ValueError(
            f"{source}: the recorded {kind} '{target}' does not exist in this version of torch/zoo; "
            f"pass {kind}=... explicitly"
        ) from None
    if kind == "optimizer" and not (isinstance(obj, type) and issubclass(obj, torch.optim.Optimizer)):
        raise ValueError(f"{source}: the recorded optimizer '{target}' is not a torch.optim.Optimizer")
    keywords = {k: v for k, v in spec.items() if k not in ("_target_", "_partial_")}
    return functools.partial(obj, **keywords)
