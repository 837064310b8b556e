"""One real validation batch, and a forward pass of any zoo task on it (the probes look at the attention it makes)."""

from __future__ import annotations

from contextlib import contextmanager

import lightning as L
import torch

from zoo.data.batches import TranslationBatch


@contextmanager
def evaluating(module: torch.nn.Module):
    """The module in eval mode inside the block; its mode restored after, also when the block fails."""
    was_training = module.training
    module.eval()
    try:
        yield module
    finally:
        module.train(was_training)


def first_val_batch(trainer: L.Trainer, pl_module: L.LightningModule):
    """The first batch of the validation loader, on the module's device (the same batch at every probe)."""
    datamodule = trainer.datamodule
    if datamodule is None or not hasattr(datamodule, "val_dataloader"):
        raise ValueError("the lab probes need a DataModule with a val_dataloader (they look at a real val batch)")
    batch = next(iter(datamodule.val_dataloader()))
    return pl_module.transfer_batch_to_device(batch, pl_module.device, 0)


def forward_batch(pl_module: L.LightningModule, batch) -> torch.Tensor:
    """The task's own forward on a batch of its data: the inputs of an (inputs, targets) pair, a translation batch's
    source and decoder inputs, or an encoder batch whole."""
    if isinstance(batch, TranslationBatch):
        return pl_module(batch.src, batch.tgt_in, src_mask=batch.src_mask)
    if isinstance(batch, (tuple, list)):
        return pl_module(batch[0])
    return pl_module(batch)


def forward_with_hooks(pl_module: L.LightningModule, batch, handles: list) -> None:
    """One eval-mode forward of the task with the probe's forward hooks in place, then the hooks removed."""
    try:
        with evaluating(pl_module):
            forward_batch(pl_module, batch)
    finally:
        for handle in handles:
            handle.remove()
