"""Causal language modelling (GPT): next-token cross-entropy, perplexity, samples, throughput and MFU."""

from __future__ import annotations

import time
from typing import Callable

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.utilities import rank_zero_info
from torchmetrics import MeanMetric
from torchmetrics.text import Perplexity

from zoo.models import ZooModel

from .common import configure_optimizers, zoo_checkpoint_info
from .text_logging import log_text
from .throughput import peak_flops


class CausalLMTask(L.LightningModule):
    task_name = "causal_lm"

    def __init__(
        self,
        net: ZooModel,
        optimizer: Callable[..., torch.optim.Optimizer],
        scheduler: Callable[..., torch.optim.lr_scheduler.LRScheduler] | None = None,
        *,
        weight_decay: float = 0.1,
        tokenizer=None,
        compile: bool = False,
        num_samples: int = 2,
        sample_tokens: int = 200,
        sample_prompt: str = "\n",
        sample_temperature: float = 0.8,
        sample_top_k: int | None = 200,
        peak_flops_per_sec: float | None = None,
    ) -> None:
        """optimizer / scheduler: partials (Hydra `_partial_: true`) completed with the parameter groups /
        the optimizer. compile: run the inner nn.Module through torch.compile (the state dict keeps plain names).
        peak_flops_per_sec: the MFU denominator; None measures the device's matmul rate at the start of fit."""
        super().__init__()
        self.save_hyperparameters(ignore=["net", "optimizer", "scheduler", "tokenizer"])
        self.net = net
        self.optimizer_factory, self.scheduler_factory = optimizer, scheduler
        self.tokenizer = tokenizer
        # Kept out of the module tree, so that checkpoints carry no "_orig_mod." names.
        self._forward_fn = torch.compile(net) if compile else net
        self.val_loss = MeanMetric()
        self.val_ppl = Perplexity()
        self.test_loss = MeanMetric()
        self._step_started: float | None = None
        self._peak: float | None = peak_flops_per_sec

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        """Logits, or with `targets` the mean loss computed without materializing them."""
        return self._forward_fn(idx) if targets is None else self._forward_fn(idx, targets=targets)

    def _loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    # ---- training ------------------------------------------------------------------------------------
    def on_fit_start(self) -> None:
        if self._peak is None:
            self._peak = peak_flops(self.device)
            rank_zero_info(f"MFU is measured against a matmul peak of {self._peak / 1e9:.0f} GFLOP/s on {self.device}")

    def on_train_batch_start(self, batch, batch_idx: int) -> None:
        self._step_started = time.perf_counter()

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        idx, targets = batch
        loss = self(idx, targets)
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def on_train_batch_end(self, outputs, batch, batch_idx: int) -> None:
        if self._step_started is None:
            return
        seconds = time.perf_counter() - self._step_started
        idx = batch[0]
        tokens_per_sec = idx.numel() / seconds
        flops = self.net.flops_per_token(idx.shape[1]) * tokens_per_sec
        # Per-device figures: every rank processes its own batch in the same time.
        self.log("train/tokens_per_sec", tokens_per_sec * self.trainer.world_size)
        if self._peak:
            self.log("train/mfu", flops / self._peak)

    def configure_optimizers(self):
        return configure_optimizers(self)

    # ---- evaluation ----------------------------------------------------------------------------------
    def validation_step(self, batch, batch_idx: int) -> None:
        idx, targets = batch
        logits = self(idx)
        self.val_loss.update(self._loss(logits, targets), weight=targets.numel())
        self.val_ppl.update(logits.float(), targets)

    def on_validation_epoch_end(self) -> None:
        loss = self.val_loss.compute()
        self.log("val/loss", loss, prog_bar=True)  # MeanMetric already reduced over ranks
        self.log("val/ppl", self.val_ppl.compute())
        self.val_loss.reset()
        self.val_ppl.reset()
        if not self.trainer.sanity_checking:
            self._log_samples()

    def test_step(self, batch, batch_idx: int) -> None:
        idx, targets = batch
        self.test_loss.update(self._loss(self(idx), targets), weight=targets.numel())

    def on_test_epoch_end(self) -> None:
        loss = self.test_loss.compute()
        self.log("test/loss", loss)
        self.log("test/ppl", torch.exp(loss))
        self.test_loss.reset()

    def _log_samples(self) -> None:
        if self.tokenizer is None or self.hparams.num_samples <= 0 or not self.trainer.is_global_zero:
            return
        prompt = torch.tensor([self.tokenizer.encode(self.hparams.sample_prompt)], device=self.device)
        prompt = prompt.expand(self.hparams.num_samples, -1)
        generator = torch.Generator(device=self.device).manual_seed(self.global_step)
        out = self.net.generate(
            prompt,
            self.hparams.sample_tokens,
            temperature=self.hparams.sample_temperature,
            top_k=self.hparams.sample_top_k,
            generator=generator,
        )
        texts = [self.tokenizer.decode(row.tolist()) for row in out]
        log_text(self.loggers, "val/samples", texts, self.global_step)

    # ---- checkpoints ---------------------------------------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        # Everything needed to rebuild the model and its tokenizer without the config or the data folder.
        checkpoint["zoo"] = zoo_checkpoint_info(self, self.tokenizer)
