"""The checkpoint written when a run stops on an exception (a crash, Ctrl-C, SIGTERM), once it has trained a step.

Lightning's OnExceptionCheckpoint without two habits: it writes nothing for a run that fails before its first step
(that checkpoint would pass for the newest), and Lightning does not turn `fit(ckpt_path=None)` into its own choice
of "last" because of it (zoo.entry.resolvers chooses, passing over truncated files).
"""

from __future__ import annotations

import os
from pathlib import Path

from lightning.pytorch.callbacks import Checkpoint, ModelCheckpoint
from lightning.pytorch.utilities import rank_zero_info

from zoo.checkpointing.atomic_io import remove_orphans_of


class ProgressOnExceptionCheckpoint(Checkpoint):
    """On a crash, Ctrl-C or SIGTERM, write `<dirpath>/<filename>.ckpt`, unless the run has not trained a step; a
    run that ends normally removes it. At the start it removes the temporary files of killed saves."""

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
        # Only after a step trained in this process: a start that fails while restoring holds the restored step with
        # fresh optimizer state, which would pass for the newest checkpoint.
        if self._first_step is None or trainer.global_step <= self._first_step:
            rank_zero_info(f"no {self.ckpt_path} written: the run stopped before it trained a step")
            return
        trainer.save_checkpoint(self.ckpt_path, weights_only=False)  # a full checkpoint: it must resume

    def teardown(self, trainer, pl_module, stage: str) -> None:
        if stage == "fit":
            trainer.strategy.remove_checkpoint(self.ckpt_path)
