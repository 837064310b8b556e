"""`FitErrorProbe` measures at the end of training what He et al. 2016's Figure 1 plots: the error on the training
images and on the held-out ones, both in eval mode over the whole split, so a difference in training error is a
difference in how well the net fits the data it was trained on (degradation), not in how well it generalizes
(overfitting). Used with zoo/models/deep_mlp.py's `DeepMLP` (residual_mnist) and with the image classifiers of other
questions (inductive_bias, bn_vit).
"""

from __future__ import annotations

import copy

import lightning as L
import torch
from torch.utils.data import DataLoader

from .record import log_on_rank_zero


class FitErrorProbe(L.Callback):
    """After training: `lab/train_error` and `lab/val_error`, the top-1 error of the final weights in eval mode on
    every image of the training and validation splits, and `lab/train_acc` (1 - the training error).

    By default the training images are those of the training loader (the run's augmentation, if any, applied: turn
    it off when this is read as "how well the net fits its training set"). With `unaugmented` they are the training
    split seen through the validation split's transform: the training images themselves, with augmentation on in
    training (a split that carries its `transform`, as zoo.data.images' do)."""

    def __init__(self, unaugmented: bool = False) -> None:
        self.unaugmented = unaugmented
        self.metrics: dict[str, float] = {}

    def on_train_end(self, trainer, pl_module) -> None:
        datamodule = trainer.datamodule
        if datamodule is None:
            raise ValueError("FitErrorProbe needs the run's DataModule (its train and val loaders)")
        train = _unaugmented_loader(datamodule) if self.unaugmented else datamodule.train_dataloader()
        was_training = pl_module.training
        pl_module.eval()
        try:
            train_error = _error(pl_module, train)
            self.metrics = {
                "lab/train_error": train_error,
                "lab/val_error": _error(pl_module, datamodule.val_dataloader()),
                "lab/train_acc": 1.0 - train_error,
            }
        finally:
            pl_module.train(was_training)
        log_on_rank_zero(trainer, self.metrics)

    def result_record(self) -> dict:
        return {"metrics": dict(self.metrics)}


def _unaugmented_loader(datamodule) -> DataLoader:
    """The training split through the validation split's transform, in evaluation-sized batches."""
    readers = getattr(datamodule, "train_dataset", None), getattr(datamodule, "eval_dataset", None)
    train, val = (readers[0](), readers[1]("val")) if all(readers) else (None, None)
    if not (hasattr(train, "transform") and hasattr(val, "transform")):
        raise ValueError(
            "FitErrorProbe(unaugmented=true) needs splits that carry their transform (zoo.data.images); "
            "use unaugmented=false and turn the augmentation off instead"
        )
    clean = copy.copy(train)
    clean.transform = val.transform
    return DataLoader(clean, batch_size=datamodule.loader_batch_size(train=False), shuffle=False)


@torch.no_grad()
def _error(pl_module, loader) -> float:
    wrong = total = 0
    for images, labels in loader:
        images, labels = images.to(pl_module.device), labels.to(pl_module.device)
        if labels.dim() == 2:  # MixUp/CutMix soft targets: the class that carries the most weight
            labels = labels.argmax(dim=-1)
        wrong += int((pl_module(images).argmax(dim=-1) != labels).sum())
        total += labels.numel()
    if total == 0:
        raise ValueError("FitErrorProbe: a split without images")
    return wrong / total
