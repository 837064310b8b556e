"""Checkpoint writes that a kill cannot half-do.

Lightning's TorchCheckpointIO writes a temporary file in TMPDIR and moves it onto the target; when TMPDIR is on
another filesystem that move is a copy, and a kill during it leaves the previous good last.ckpt truncated.
AtomicCheckpointIO writes the temporary file beside the target, fsyncs it and renames it over the target, so
last.ckpt is always a complete file. The temporary files a kill leaves are deleted when the next run starts
(`remove_orphans_of`).
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.callbacks import Checkpoint
from lightning.pytorch.utilities import rank_zero_info

from zoo.data.atomic import replacing

from .reading import code_refused, names_code

TEMP_MARK = ".tmp-"


def temp_path(target: Path) -> Path:
    """The temporary file a save of `target` writes first: hidden, beside it, named after the writing process."""
    return target.with_name(f".{target.name}{TEMP_MARK}{os.getpid()}")


def remove_orphans(directory: str | Path) -> list[Path]:
    directory = Path(directory)
    if not directory.is_dir():
        return []
    removed = []
    for path in directory.glob(f".*.ckpt{TEMP_MARK}*"):
        path.unlink(missing_ok=True)
        removed.append(path)
    return removed


class AtomicCheckpointIO(TorchCheckpointIO):
    """TorchCheckpointIO whose local saves are atomic (remote URLs keep Lightning's way), and whose loads never
    unpickle code (weights_only=True unless a caller asks otherwise)."""

    def load_checkpoint(self, path, map_location: Any = lambda storage, loc: storage, weights_only: bool | None = None):
        try:
            return super().load_checkpoint(path, map_location=map_location, weights_only=weights_only is not False)
        except pickle.UnpicklingError as error:
            if not names_code(error):
                raise
            raise code_refused(path) from error

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if "://" in str(path):
            return super().save_checkpoint(checkpoint, path, storage_options)
        target = Path(path)
        with replacing(target, temp=temp_path(target), durable=True) as temporary:
            torch.save(checkpoint, temporary)


def remove_orphans_of(trainer) -> None:
    if not trainer.is_global_zero:
        return
    directories = {getattr(cb, "dirpath", None) for cb in trainer.callbacks if isinstance(cb, Checkpoint)}
    for directory in sorted(str(d) for d in directories if d):
        removed = remove_orphans(directory)
        if removed:
            rank_zero_info(
                f"removed {len(removed)} temporary file(s) of interrupted checkpoint saves in {directory}: "
                + ", ".join(p.name for p in removed)
            )
