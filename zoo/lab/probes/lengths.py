"""LengthProbe: a language model's validation loss per position at multiples of the training length (a fixed,
seeded sample of disjoint windows): series `loss_by_position/<f>x`, `lab/loss@<f>x` (all positions) and
`lab/loss_beyond@<f>x` (positions past the training length L). Like for like, `lab/loss_window@<f>x` is the loss of
the same tokens past L read from their own last L tokens only (a sliding window of the training length): the
difference is what the context beyond L costs or gives. The model's context must hold the longest window."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from zoo.data.windows import DisjointWindows

from .batches import evaluating
from .record import Recorder, log_on_rank_zero


class LengthProbe(Recorder):
    def __init__(self, factors: list[float] = (1, 2, 4), max_windows: int = 32, batch_size: int = 8) -> None:
        if not factors or any(f <= 0 for f in factors) or max_windows <= 0 or batch_size <= 0:
            raise ValueError(
                f"LengthProbe needs positive factors, max_windows and batch_size, got {factors}, "
                f"{max_windows}, {batch_size}"
            )
        super().__init__()
        self.factors, self.max_windows, self.batch_size = list(factors), max_windows, batch_size

    def on_train_end(self, trainer, pl_module) -> None:
        data = trainer.datamodule
        train_len = int(getattr(data, "hparams", {}).get("block_size", 0))
        loader = data.val_dataloader() if data is not None else None
        tokens = getattr(getattr(loader, "dataset", None), "tokens", None)
        if not train_len or tokens is None:
            raise ValueError("LengthProbe is for language-model data (data.block_size and token windows)")
        context = getattr(getattr(pl_module.net, "config", None), "block_size", None)
        for factor in self.factors:
            length = int(round(factor * train_len))
            if context is not None and length > context:
                raise ValueError(
                    f"LengthProbe evaluates at {length} tokens ({factor}x data.block_size={train_len}) but the model's "
                    f"context is model.net.block_size={context}; set model.net.block_size >= {length}"
                )
            losses = self._loss_by_position(pl_module, tokens, length)
            name = f"{factor:g}x"
            self.series[f"loss_by_position/{name}"] = losses.tolist()
            self.metrics[f"lab/loss@{name}"] = float(losses.mean())
            if length > train_len:
                self.metrics[f"lab/loss_beyond@{name}"] = float(losses[train_len:].mean())
                within = self._loss_within_training_length(pl_module, tokens, length, train_len)
                self.metrics[f"lab/loss_window@{name}"] = float(within.mean())
        log_on_rank_zero(trainer, self.metrics)

    @torch.no_grad()
    def _loss_by_position(self, pl_module, tokens, length: int) -> torch.Tensor:
        windows = DisjointWindows(tokens, length, seed=0)
        count = min(self.max_windows, len(windows))
        total = torch.zeros(length, dtype=torch.float64)
        with evaluating(pl_module):
            for start in range(0, count, self.batch_size):
                rows = [windows[i] for i in range(start, min(count, start + self.batch_size))]
                idx = torch.stack([r[0] for r in rows]).to(pl_module.device)
                targets = torch.stack([r[1] for r in rows]).to(pl_module.device)
                logits = pl_module(idx)
                loss = F.cross_entropy(logits.float().transpose(1, 2), targets, reduction="none")  # (B, T)
                total += loss.sum(0).double().cpu()
        return total / count

    @torch.no_grad()
    def _loss_within_training_length(self, pl_module, tokens, length: int, train_len: int) -> torch.Tensor:
        """Per position past `train_len` of the same windows: the loss of its target read from only the `train_len`
        tokens that end at it (a sliding window)."""
        windows = DisjointWindows(tokens, length, seed=0)
        count = min(self.max_windows, len(windows))
        total = torch.zeros(length - train_len, dtype=torch.float64)
        with evaluating(pl_module):
            for i in range(count):
                idx, targets = windows[i]
                # slice s holds tokens s .. s + train_len - 1; its last one, at position s + train_len - 1, is past
                # the training length for s >= 1
                slices = idx.unfold(0, train_len, 1)[1:]
                wanted = targets[train_len:]
                for start in range(0, len(slices), self.batch_size * 8):
                    part = slices[start : start + self.batch_size * 8].to(pl_module.device)
                    logits = pl_module(part)[:, -1].float()
                    target = wanted[start : start + len(part)].to(pl_module.device)
                    total[start : start + len(part)] += F.cross_entropy(logits, target, reduction="none").double().cpu()
        return total / count
