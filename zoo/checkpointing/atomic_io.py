"""Checkpoint writes that a kill cannot half-do, and no checkpoint file left where resume looks that holds nothing.

Lightning's TorchCheckpointIO writes through an fsspec transaction: a temporary file in TMPDIR, moved onto the
target at the end. When TMPDIR is on another filesystem that move is a copy, and a kill during it leaves the
previous good last.ckpt truncated (and the temporary file behind). AtomicCheckpointIO writes the temporary file
beside the target instead, fsyncs it, renames it over the target (atomic within one directory) and fsyncs the
directory, so last.ckpt is at every moment either the previous complete file or the new complete one. A kill still
leaves the temporary file; the next run deletes those when it starts (`remove_orphans_of`, called by
zoo.callbacks.progress_on_exception.ProgressOnExceptionCheckpoint).
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
    """Delete the temporary files that killed saves left in `directory`; returns what was removed."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    removed = []
    for path in directory.glob(f".*.ckpt{TEMP_MARK}*"):
        path.unlink(missing_ok=True)
        removed.append(path)
    return removed


class AtomicCheckpointIO(TorchCheckpointIO):
    """TorchCheckpointIO whose local saves are atomic on any filesystem layout (remote URLs keep Lightning's way),
    and whose loads never unpickle code (weights_only=True unless a caller asks otherwise)."""

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
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options for a local checkpoint ({path})")
        target = Path(path)
        with replacing(target, temp=temp_path(target), durable=True) as temporary:
            torch.save(checkpoint, temporary)


def remove_orphans_of(trainer) -> None:
    """Delete the temporary files of killed saves in every checkpoint directory of `trainer` (on rank 0)."""
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
