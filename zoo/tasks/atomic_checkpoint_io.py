"""Checkpoint writes that a kill cannot half-do, and no checkpoint file left where resume looks that holds nothing.

Lightning's TorchCheckpointIO writes through an fsspec transaction: a temporary file in TMPDIR, moved onto the
target at the end. When TMPDIR is on another filesystem that move is a copy, and a kill during it leaves the
previous good last.ckpt truncated (and the temporary file behind). AtomicCheckpointIO writes the temporary file
beside the target instead, fsyncs it, renames it over the target (atomic within one directory) and fsyncs the
directory, so last.ckpt is at every moment either the previous complete file or the new complete one. A kill still
leaves the temporary file; the next run deletes those when it starts (`remove_orphans_of`).

`ProgressOnExceptionCheckpoint` is Lightning's OnExceptionCheckpoint without two habits: it writes nothing for a run
that fails before its first optimizer step (a step-0 checkpoint would be taken for the newest one to resume), and
it is not an OnExceptionCheckpoint, so Lightning does not turn `fit(ckpt_path=None)` into its own choice of "last"
(which reads a truncated or step-0 file as readily as a good one); zoo.entry.resolvers chooses instead.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.callbacks import Checkpoint, ModelCheckpoint
from lightning.pytorch.utilities import rank_zero_info

from .checkpoint import code_refused, names_code

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


def _fsync_directory(directory: Path) -> None:
    # The rename is durable only once the directory entry is on disk (POSIX; Windows cannot open a directory).
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = temp_path(target)
        try:
            with open(temporary, "wb") as file:
                torch.save(checkpoint, file)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, target)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
        _fsync_directory(target.parent)


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


class ProgressOnExceptionCheckpoint(Checkpoint):
    """On a crash, Ctrl-C or SIGTERM, write `<dirpath>/<filename>.ckpt`, unless the run has not trained a step.
    A run that ends normally removes it (its last.ckpt is newer). At the start of a run it also removes the
    temporary files that killed saves left in the checkpoint directories (`remove_orphans_of`)."""

    FILE_EXTENSION = ModelCheckpoint.FILE_EXTENSION

    def __init__(self, dirpath: str | Path, filename: str = "on_exception") -> None:
        super().__init__()
        if not filename:
            raise ValueError("ProgressOnExceptionCheckpoint: filename must not be empty")
        # Known at construction: an exception can come before setup.
        self.dirpath, self.filename = dirpath, filename
        self._first_step: int | None = None  # the step this process's training started from

    @property
    def ckpt_path(self) -> str:
        return os.path.join(self.dirpath, self.filename + self.FILE_EXTENSION)

    def setup(self, trainer, pl_module, stage: str) -> None:
        remove_orphans_of(trainer)

    def on_train_start(self, trainer, pl_module) -> None:
        self._first_step = trainer.global_step

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        # Only after a step trained in this process: a start that fails while restoring a checkpoint (another
        # optimizer, a state that does not fit) holds the restored step with fresh optimizer state, which would
        # pass for the newest checkpoint; the one it resumed from is still there.
        if self._first_step is None or trainer.global_step <= self._first_step:
            rank_zero_info(f"no {self.ckpt_path} written: the run stopped before it trained a step")
            return
        trainer.save_checkpoint(self.ckpt_path, weights_only=False)  # a full checkpoint: it must resume

    def teardown(self, trainer, pl_module, stage: str) -> None:
        if stage == "fit":
            trainer.strategy.remove_checkpoint(self.ckpt_path)
