"""Token tagging with a BERT encoder (BertForTokenClassification's head: dropout, a linear layer), bidirectional or
`causal` (the lab's `direction` question). Positions without a tag (-100) count in neither loss nor accuracy."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy

from zoo.models import BERT
from zoo.optim.param_groups import param_groups

from .base import EvaluatedTask

IGNORE = -100  # the data's "no tag here" (zoo.data.char_tags.IGNORE), cross_entropy's ignore_index


class TokenTaggingTask(EvaluatedTask):
    task_name = "token_tagging"

    def __init__(
        self,
        net: BERT,
        optimizer: Callable[..., torch.optim.Optimizer] | None = None,
        scheduler: Callable[..., torch.optim.lr_scheduler.LRScheduler] | None = None,
        *,
        num_tags: int,
        weight_decay: float = 0.01,
        tokenizer=None,
        compile: bool = False,
    ) -> None:
        """net: a BERT built with head='none' (the tagging head is the task's). num_tags: how many tags the data's
        rule has (the data gives it). The rest: see `ZooTask`."""
        if not isinstance(net, BERT) or net.config.head != "none":
            raise ValueError("token tagging needs a BERT built with head='none' (the task adds the tagging head)")
        if num_tags < 2:
            raise ValueError(f"token tagging needs num_tags >= 2, got {num_tags}")
        super().__init__(net, optimizer, scheduler, weight_decay=weight_decay, compile=compile, tokenizer=tokenizer)
        c = net.config
        self.head = nn.Sequential(nn.Dropout(c.hidden_dropout_prob), nn.Linear(c.hidden_size, num_tags))
        nn.init.normal_(self.head[1].weight, std=c.initializer_range)
        nn.init.zeros_(self.head[1].bias)
        # micro: the fraction of tagged tokens tagged right, over all of them (ignore_index leaves the rest out).
        self.train_acc, self.val_acc = (
            MulticlassAccuracy(num_classes=num_tags, average="micro", ignore_index=IGNORE) for _ in range(2)
        )
        self.val_loss = MeanMetric()

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """(B, T) ids -> (B, T, num_tags) logits."""
        return self.head(self.net(input_ids).hidden)

    def param_groups(self) -> list[dict]:
        return super().param_groups() + param_groups(self.head, self.hparams.weight_decay)

    def _loss(self, logits: torch.Tensor, tags: torch.Tensor) -> tuple[torch.Tensor, int]:
        """Mean cross-entropy over the tagged tokens, and how many there were."""
        count = int((tags != IGNORE).sum())
        loss = F.cross_entropy(logits.flatten(0, 1).float(), tags.flatten(), ignore_index=IGNORE)
        return (loss if count else logits.sum() * 0.0), count

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        ids, tags = batch
        logits = self(ids)
        loss, count = self._loss(logits, tags)
        self.train_acc(logits.argmax(-1), tags)
        self.log("train/loss", loss, prog_bar=True)
        self.log("train/acc", self.train_acc, on_step=True, on_epoch=False)
        # Over the tagged tokens of the whole optimizer step (zoo.tasks.token_loss), as a language model's loss.
        return self.token_loss(loss, count)

    def _evaluate(self, batch) -> None:
        ids, tags = batch
        logits = self(ids)
        loss, count = self._loss(logits, tags)
        if count:
            self.val_loss.update(loss, weight=count)
        self.val_acc.update(logits.argmax(-1), tags)

    def _log_evaluation(self, split: str) -> None:
        self.log(f"{split}/loss", self.val_loss.compute(), prog_bar=True)
        self.log(f"{split}/acc", self.val_acc.compute(), prog_bar=True)
        self.val_loss.reset()
        self.val_acc.reset()

    def batch_samples(self, batch) -> int:
        return batch[0].shape[0]

    def batch_items(self, batch) -> int:
        return batch[0].numel()  # windows of text: no padding

    def batch_flops(self, batch) -> float:
        return self.net.flops_per_token(batch[0].shape[1]) * batch[0].numel()
