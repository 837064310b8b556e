"""BERT pretraining: masked-LM cross-entropy at the masked positions + next-sentence cross-entropy."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from zoo.models import BERT

from .base import EvaluatedTask


class BertPretrainingTask(EvaluatedTask):
    task_name = "mlm_nsp"

    def __init__(
        self,
        net: BERT,
        optimizer: Callable[..., torch.optim.Optimizer] | None = None,
        scheduler: Callable[..., torch.optim.lr_scheduler.LRScheduler] | None = None,
        *,
        weight_decay: float = 0.01,
        nsp_weight: float = 1.0,
        tokenizer=None,
        compile: bool = False,
    ) -> None:
        """optimizer / scheduler: partials (Hydra `_partial_: true`). nsp_weight: 0 turns NSP off (RoBERTa),
        the original objective is MLM + NSP with equal weight."""
        if getattr(net, "mlm", None) is None:
            raise ValueError("pretraining needs a BERT built with head='pretraining' (MLM and NSP heads)")
        super().__init__(net, optimizer, scheduler, weight_decay=weight_decay, compile=compile, tokenizer=tokenizer)
        self.val_mlm_loss, self.val_nsp_loss = MeanMetric(), MeanMetric()
        self.val_mlm_acc = MulticlassAccuracy(num_classes=net.config.vocab_size, average="micro")
        self.val_nsp_acc = MulticlassAccuracy(num_classes=2, average="micro")

    def forward(self, batch):
        return self.net(
            batch.input_ids,
            token_type_ids=batch.token_type_ids,
            attention_mask=batch.attention_mask,
            mlm_positions=batch.labels != -100,
        )

    def _losses(self, batch):
        out = self(batch)
        targets = batch.labels[batch.labels != -100]  # row-major, the order of the selected logits
        mlm = F.cross_entropy(out.mlm_logits.float(), targets)
        nsp = F.cross_entropy(out.nsp_logits.float(), batch.nsp_labels)
        return out, targets, mlm, nsp

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        _, targets, mlm, nsp = self._losses(batch)
        self.log("train/loss", mlm + self.hparams.nsp_weight * nsp, prog_bar=True)
        self.log("train/mlm_loss", mlm)
        self.log("train/nsp_loss", nsp)
        # MLM over the masked tokens of the whole optimizer step (zoo.tasks.token_loss); NSP keeps its mean.
        return self.token_loss(mlm, targets.numel()) + self.hparams.nsp_weight * nsp

    def batch_samples(self, batch) -> int:
        return batch.input_ids.shape[0]

    def batch_items(self, batch) -> int:
        return int(batch.attention_mask.sum())  # real tokens, padding left out

    def batch_flops(self, batch) -> float:
        # The encoder runs on every position, padding included; the vocabulary projection only on masked ones.
        c = self.net.config
        masked = int((batch.labels != -100).sum())
        return (
            self.net.flops_per_token(batch.input_ids.shape[1]) * batch.input_ids.numel()
            + 6 * c.vocab_size * c.hidden_size * masked
        )

    def _evaluate(self, batch) -> None:
        out, targets, mlm, nsp = self._losses(batch)
        self.val_mlm_loss.update(mlm, weight=targets.numel())
        self.val_nsp_loss.update(nsp, weight=batch.nsp_labels.numel())
        self.val_mlm_acc.update(out.mlm_logits.argmax(-1), targets)
        self.val_nsp_acc.update(out.nsp_logits.argmax(-1), batch.nsp_labels)

    def _log_evaluation(self, split: str) -> None:
        # The metrics reduce over ranks themselves. Perplexity is exp of the token-weighted mean MLM loss.
        mlm, nsp = self.val_mlm_loss.compute(), self.val_nsp_loss.compute()
        self.log(f"{split}/loss", mlm + self.hparams.nsp_weight * nsp, prog_bar=True)
        self.log(f"{split}/mlm_loss", mlm)
        self.log(f"{split}/mlm_ppl", torch.exp(mlm))
        self.log(f"{split}/mlm_acc", self.val_mlm_acc.compute(), prog_bar=True)
        self.log(f"{split}/nsp_loss", nsp)
        self.log(f"{split}/nsp_acc", self.val_nsp_acc.compute(), prog_bar=True)
        for metric in (self.val_mlm_loss, self.val_nsp_loss, self.val_mlm_acc, self.val_nsp_acc):
            metric.reset()
