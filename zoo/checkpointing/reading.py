"""Reading zoo checkpoints with `weights_only=True`, and checking them before a run resumes."""

from __future__ import annotations

import os
import zipfile
from functools import lru_cache
from pathlib import Path

from zoo.core.weights_file import (  # noqa: F401  (re-exported)
    code_refused,
    names_code,
    not_a_checkpoint_file,
    torch_load_weights,
)
from zoo.models import MODEL_TYPES, ZooModel
from zoo.optim.former_names import current_name

from .weights_checksum import verify_checkpoint


@lru_cache(maxsize=64)  # keyed by size and mtime: choosing a checkpoint and resuming from it hash it once
def _checked(path: str, size: int, mtime_ns: int) -> int:
    checkpoint = torch_load_weights(path, mmap=True)
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise ValueError(f"{path} is not a Lightning checkpoint (it has no state_dict)")
    verify_checkpoint(checkpoint, path)
    return int(checkpoint.get("global_step", 0))


def check_checkpoint_file(path: str | Path, *, option: str = "ckpt_path") -> int:
    """Check that a checkpoint is present, complete, weights only and matches its checksum; returns its global step.
    `option`: what the user gave the path with, for the message."""
    path = Path(path)
    if not path.is_file():
        raise not_a_checkpoint_file(path, option)
    if not zipfile.is_zipfile(path):  # torch.save writes a zip archive; a truncated or foreign file is not one
        raise ValueError(f"{path} is not a readable checkpoint (truncated or not written by torch.save)")
    stat = os.stat(path)
    return _checked(str(path), stat.st_size, stat.st_mtime_ns)


def read_checkpoint(path: str | Path) -> dict:
    path = Path(path)
    checkpoint = torch_load_weights(path)
    if not isinstance(checkpoint, dict) or "zoo" not in checkpoint:
        raise ValueError(f"{path} is not a transformer-zoo checkpoint (it has no 'zoo' section)")
    verify_checkpoint(checkpoint, path)
    return checkpoint


def load_model_from_checkpoint(path: str | Path, *, task: str | None = None) -> tuple[ZooModel, dict]:
    """(the model of a zoo checkpoint in eval mode, its 'zoo' section); with `task`, another task's is refused."""
    checkpoint = read_checkpoint(path)
    info = checkpoint["zoo"]
    if task is not None and info.get("task") != task:
        raise ValueError(
            f"{path} holds a {info.get('model_type')} model trained for task '{info.get('task')}', "
            f"but this command needs a '{task}' checkpoint"
        )
    model = build_model(info, path)
    model.load_state_dict(_network_state(checkpoint))
    return model.eval(), info


def _network_state(checkpoint: dict) -> dict:
    return {k.removeprefix("net."): v for k, v in checkpoint.get("state_dict", {}).items() if k.startswith("net.")}


def build_model(info: dict, path: str | Path) -> ZooModel:
    model_type = info.get("model_type")
    if model_type not in MODEL_TYPES:
        raise ValueError(f"{path}: unknown model_type '{model_type}'")
    return MODEL_TYPES[model_type].from_config_dict(info["model_config"])


def check_same_model(checkpoint: dict, net: ZooModel, source: str | Path) -> None:
    """Refuse a checkpoint whose weights do not fit `net` (another model, or another size), naming what differs:
    from the checkpoint's "zoo" section, else the first weight that does not fit."""
    theirs = _network_state(checkpoint)
    ours = net.state_dict()
    if theirs.keys() == ours.keys() and all(tuple(theirs[k].shape) == tuple(ours[k].shape) for k in ours):
        return
    info = checkpoint.get("zoo") or {}
    their_type, their_config = info.get("model_type", "unknown"), info.get("model_config") or {}
    our_config = net.config_dict()
    differing = [k for k in sorted(our_config) if k in their_config and their_config[k] != our_config[k]]
    if their_type != net.model_type:
        raise ValueError(
            f"ckpt_path {source} holds a {their_type} model, but this run builds a {net.model_type}; give a "
            f"{net.model_type} checkpoint, or choose the model it was trained with (model=...)"
        )
    if differing:
        held = ", ".join(f"{k}={their_config[k]}" for k in differing)
        built = ", ".join(f"{k}={our_config[k]}" for k in differing)
    else:
        key = next((k for k in ours if k not in theirs or tuple(theirs[k].shape) != tuple(ours[k].shape)), None)
        key = key or next(k for k in theirs if k not in ours)
        held = f"{key} of shape {tuple(theirs[key].shape)}" if key in theirs else f"no {key}"
        built = f"{key} of shape {tuple(ours[key].shape)}" if key in ours else f"no {key}"
    raise ValueError(
        f"ckpt_path {source} holds a {their_type} model with {held}, but this run builds a {net.model_type} with "
        f"{built}; give a checkpoint of this model, or the model options it was trained with"
    )


def check_resume(path: str | Path, net: ZooModel, optimizer: dict | None) -> None:
    """Refuse, before a run writes anything, a checkpoint it cannot continue: weights of another model or size, or
    the state of another kind of optimizer (`optimizer`: the run's recorded optimizer partial)."""
    checkpoint = torch_load_weights(path, mmap=True)
    check_same_model(checkpoint, net, path)
    recorded = (checkpoint.get("hyper_parameters") or {}).get("optimizer") or {}
    # A checkpoint written before the optimizers moved to zoo.optim names the old module (zoo.tasks.muon...).
    theirs, ours = recorded.get("_target_"), (optimizer or {}).get("_target_")
    theirs = current_name(theirs) if isinstance(theirs, str) else theirs
    if theirs and ours and theirs != ours:
        raise ValueError(
            f"ckpt_path {path} holds the state of a {theirs} optimizer, but this run configures {ours}; resume with "
            f"model.optimizer._target_={theirs}, or train a new run in a directory of its own"
        )
