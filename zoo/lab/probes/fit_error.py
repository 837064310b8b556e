"""FitErrorProbe: what He et al. 2016's Figure 1 plots, at the end of training: `lab/train_error` and
`lab/val_error`, the top-1 error of the final weights in eval mode over the whole training and validation splits
(and `lab/train_acc`), so that a difference in training error is one of fit (degradation), not of generalization."""

from __future__ import annotations

import copy

import torch
from torch.utils.data import DataLoader

from .batches import evaluating
from .record import Recorder


class FitErrorProbe(Recorder):
    """With `unaugmented`, the training split is read through the validation split's transform (a split that carries
    its `transform`, as zoo.data.images' do); else through the training loader, augmentation and all."""

    def __init__(self, unaugmented: bool = False) -> None:
        super().__init__()
        self.unaugmented = unaugmented

    def on_train_end(self, trainer, pl_module) -> None:
        datamodule = trainer.datamodule
        if datamodule is None:
            raise ValueError("FitErrorProbe needs the run's DataModule (its train and val loaders)")
        train = _unaugmented_loader(datamodule) if self.unaugmented else datamodule.train_dataloader()
        with evaluating(pl_module):
            train_error = _error(pl_module, train)
            val_error = _error(pl_module, datamodule.val_dataloader())
        self.record(
            trainer, {"lab/train_error": train_error, "lab/val_error": val_error, "lab/train_acc": 1.0 - train_error}
        )


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
