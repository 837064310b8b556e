"""PerExampleRecorder: which dev examples a classifier got right at its last complete validation pass, one boolean
per example in the dev set's own order (`val_correct.npy` beside result.json), so that two arms' accuracies can be
compared example by example (McNemar's test, zoo/lab/decide/stats.py). The classification tasks return
`{"correct", "labels"}` from their validation_step. result.json references the file:

    "per_example": {"val/acc": {"file": "val_correct.npy", "n": 872, "of": 872, "examples": "<sha256>", "accuracy"}}

`n` examples were covered of the dev set's `of` (limit_val_batches cuts it short); `examples` fingerprints which.
Nothing is recorded when the order is not the dataset's (a shuffled or distributed val loader)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, SequentialSampler

FILE = "val_correct.npy"
METRIC = "val/acc"  # what the tasks' "correct" adds up to


def fingerprint(labels: np.ndarray) -> str:
    """Which examples a vector covers, as far as the record can tell: their number and labels, in order."""
    labels = np.ascontiguousarray(labels, dtype=np.int64)
    return hashlib.sha256(len(labels).to_bytes(8, "little") + labels.tobytes()).hexdigest()


def _why_unordered(trainer: L.Trainer) -> str | None:
    """Why this validation pass's batches are not the dev set in its own order; None when they are."""
    if trainer.world_size > 1:
        return "distributed validation (each rank sees a share of the dev set)"
    loaders = trainer.val_dataloaders
    if not isinstance(loaders, DataLoader):
        return "not exactly one val dataloader"
    if not isinstance(loaders.sampler, SequentialSampler):
        return f"the val dataloader's sampler is {type(loaders.sampler).__name__}, not sequential"
    return None


class PerExampleRecorder(L.Callback):
    """directory: where result.json goes (`${paths.output_dir}`)."""

    def __init__(self, directory: str) -> None:
        self.directory = Path(directory)
        self._correct: list[torch.Tensor] = []
        self._labels: list[torch.Tensor] = []
        self._skip: str | None = None
        self._last: tuple[np.ndarray, np.ndarray, int] | None = None  # correct, labels, size of the dev set
        self.skipped: str | None = None  # why the last pass left no record (shown by tests, never raised)

    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._correct, self._labels = [], []
        self._skip = "sanity check" if trainer.sanity_checking else _why_unordered(trainer)

    def on_validation_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if self._skip is not None:
            return
        if not isinstance(outputs, dict) or "correct" not in outputs or "labels" not in outputs:
            self._skip = f"{type(pl_module).__name__}.validation_step returns no per-example correctness"
            return
        self._correct.append(outputs["correct"].detach().to("cpu", torch.bool).reshape(-1))
        self._labels.append(outputs["labels"].detach().to("cpu", torch.int64).reshape(-1))

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._skip == "sanity check":  # not a measurement: the record of the last real pass stands
            return
        self.skipped = self._skip
        if self._skip is not None or not self._correct:
            self._last = None  # a later pass without a record must not leave an earlier pass's record standing
            return
        size = len(trainer.val_dataloaders.dataset)
        self._last = (torch.cat(self._correct).numpy(), torch.cat(self._labels).numpy(), size)
        self._correct, self._labels = [], []

    def result_record(self) -> dict:
        if self._last is None:
            return {}
        correct, labels, size = self._last
        self.directory.mkdir(parents=True, exist_ok=True)
        np.save(self.directory / FILE, correct)
        entry = {
            "file": FILE,
            "n": len(correct),
            "of": size,
            "examples": fingerprint(labels),
            "accuracy": float(correct.mean()),
        }
        return {"per_example": {METRIC: entry}}
