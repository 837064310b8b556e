"""Causal language modelling (GPT): next-token cross-entropy, perplexity, next-token accuracy and samples. Targets
of -100 are not scored (zoo/data/recall.py scores a few positions). The network starts from scratch or from a
pretrained GPT (`pretrained`: a Hugging Face GPT-2 directory or a zoo .ckpt), whose architecture wins over `net`'s."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from lightning.pytorch.utilities import rank_zero_info
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy
from torchmetrics.text import Perplexity

from zoo.models import GPT, ZooModel

from .base import ZooTask
from .pretrained import check_architecture, check_tokenizer, load_pretrained, rebuilt, run_options
from .text_logging import log_text

IGNORE_INDEX = -100  # F.cross_entropy's and GPT.loss's default: a target that is not scored

PRETRAINED_FORMATS = (
    "a Hugging Face GPT-2 directory (config.json + model.safetensors or pytorch_model.bin) or a zoo checkpoint "
    "(.ckpt) of a GPT"
)


class CausalLMTask(ZooTask):
    task_name = "causal_lm"
    # A rebuilt task takes its network from the checkpoint, not again from the pretrained model.
    not_rebuilt = ("pretrained",)

    def __init__(
        self,
        net: ZooModel,
        optimizer: Callable[..., torch.optim.Optimizer] | None = None,
        scheduler: Callable[..., torch.optim.lr_scheduler.LRScheduler] | None = None,
        *,
        weight_decay: float = 0.1,
        pretrained: str | None = None,
        tokenizer=None,
        compile: bool = False,
        num_samples: int = 2,
        sample_tokens: int = 200,
        sample_prompt: str = "\n",
        sample_temperature: float = 0.8,
        sample_top_k: int | None = 200,
    ) -> None:
        """pretrained: a Hugging Face GPT-2 directory or a zoo checkpoint (.ckpt) of a GPT to start from; `net` gives
        the dropout and compute options. num_samples / sample_*: text sampled at every validation during fit (needs the
        tokenizer; 0 turns it off). The rest: see `ZooTask`."""
        if pretrained is not None:
            net = self._from_pretrained(net, str(pretrained), tokenizer)
        super().__init__(net, optimizer, scheduler, weight_decay=weight_decay, compile=compile, tokenizer=tokenizer)
        vocab = self.net.config.vocab_size
        self.val_loss, self.test_loss = MeanMetric(), MeanMetric()
        self.val_ppl = Perplexity(ignore_index=IGNORE_INDEX)
        self.val_acc, self.test_acc = (
            MulticlassAccuracy(vocab, average="micro", ignore_index=IGNORE_INDEX) for _ in range(2)
        )

    @staticmethod
    def _from_pretrained(net: ZooModel, pretrained: str, tokenizer) -> GPT:
        from zoo.interop import load_hf  # interop reads the HF files; imported here, only when asked for

        source, stored = load_pretrained(pretrained, GPT, load_hf, formats=PRETRAINED_FORMATS)
        c = source.config
        check_tokenizer(tokenizer, pretrained, stored, c.vocab_size)
        # vocab_size as the entry fills it in from the tokenizer (just checked) is the data's, not a choice of net's.
        filled = {"vocab_size"} if tokenizer is not None and net.config.vocab_size == tokenizer.vocab_size else set()
        check_architecture(net, source, pretrained, keep={"block_size", "dropout", *filled}, what="GPT")
        if net.config.block_size > c.block_size:
            raise ValueError(
                f"block_size={net.config.block_size} (data.block_size) is longer than the {c.block_size} positions of "
                f"the pretrained model {pretrained}; set data.block_size={c.block_size} or less"
            )
        model = rebuilt(source, **run_options(net, ["dropout"]))
        model.load_state_dict(source.state_dict())
        rank_zero_info(
            f"GPT loaded from {pretrained}: {c.n_layer} layers, {c.n_head} heads, {c.n_embd} wide, {c.block_size} "
            f"positions, vocab_size {c.vocab_size}"
        )
        return model

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.net(idx)

    def _loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    # ---- training ------------------------------------------------------------------------------------
    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        idx, targets = batch
        loss = self.net.loss(idx, targets)
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def batch_samples(self, batch) -> int:
        return batch[0].shape[0]

    def batch_items(self, batch) -> int:
        return batch[0].numel()

    def batch_flops(self, batch) -> float:
        idx = batch[0]
        return self.net.flops_per_token(idx.shape[1]) * idx.numel()

    # ---- evaluation ----------------------------------------------------------------------------------
    def _score(self, logits: torch.Tensor, targets: torch.Tensor, loss: MeanMetric, acc: MulticlassAccuracy) -> None:
        loss.update(self._loss(logits, targets), weight=(targets != IGNORE_INDEX).sum())
        acc.update(logits.argmax(-1), targets)

    def validation_step(self, batch, batch_idx: int) -> None:
        idx, targets = batch
        logits = self(idx)
        self._score(logits, targets, self.val_loss, self.val_acc)
        self.val_ppl.update(logits.float(), targets)

    def on_validation_epoch_end(self) -> None:
        loss = self.val_loss.compute()
        self.log("val/loss", loss, prog_bar=True)  # MeanMetric already reduced over ranks
        self.log("val/ppl", self.val_ppl.compute())
        self.log("val/acc", self.val_acc.compute())
        for metric in (self.val_loss, self.val_ppl, self.val_acc):
            metric.reset()
        if not self.trainer.sanity_checking:
            self._log_samples()

    def test_step(self, batch, batch_idx: int) -> None:
        idx, targets = batch
        self._score(self(idx), targets, self.test_loss, self.test_acc)

    def on_test_epoch_end(self) -> None:
        loss = self.test_loss.compute()
        self.log("test/loss", loss)
        self.log("test/ppl", torch.exp(loss))
        self.log("test/acc", self.test_acc.compute())
        self.test_loss.reset()
        self.test_acc.reset()

    def _log_samples(self) -> None:
        """Every rank samples (a sharded network gathers its weights from all ranks) and rank 0 logs."""
        if self.tokenizer is None or self.hparams.num_samples <= 0:
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
        if self.trainer.is_global_zero:
            texts = [self.tokenizer.decode(row.tolist()) for row in out]
            log_text(self.loggers, "val/samples", texts, self.global_step)
