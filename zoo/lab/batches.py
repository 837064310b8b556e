"""One real validation batch, and a forward pass of any zoo task on it (the probes look at the attention it makes)."""

from __future__ import annotations

import lightning as L
import torch


def first_val_batch(trainer: L.Trainer, pl_module: L.LightningModule):
    """The first batch of the validation loader, on the module's device (the same batch at every probe)."""
    datamodule = trainer.datamodule
    if datamodule is None or not hasattr(datamodule, "val_dataloader"):
        raise ValueError("the lab probes need a DataModule with a val_dataloader (they look at a real val batch)")
    batch = next(iter(datamodule.val_dataloader()))
    return pl_module.transfer_batch_to_device(batch, pl_module.device, 0)


def forward_batch(pl_module: L.LightningModule, batch) -> torch.Tensor:
    """The task's own forward on a batch of its data, whatever the batch layout:
    (inputs, targets) pairs (language models, images), seq2seq dicts, or BERT-style batch objects."""
    if isinstance(batch, (tuple, list)):
        return pl_module(batch[0])
    if isinstance(batch, dict) and "src" in batch:
        return pl_module(batch["src"], batch["tgt_in"], src_mask=batch.get("src_mask"))
    return pl_module(batch)
