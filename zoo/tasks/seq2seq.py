"""Sequence-to-sequence translation (the encoder-decoder Transformer): label-smoothed cross-entropy, and sacreBLEU's
corpus score (13a, cased) of the detokenized translations against the raw references."""

from __future__ import annotations

from collections.abc import Callable

import sacrebleu
import torch
import torch.distributed as dist
from torchmetrics import MeanMetric

from zoo.models import Transformer
from zoo.strategies.fsdp import lockstep

from .base import ZooTask
from .text_logging import log_text


class Seq2SeqTask(ZooTask):
    task_name = "seq2seq"

    def __init__(
        self,
        net: Transformer,
        optimizer: Callable[..., torch.optim.Optimizer] | None = None,
        scheduler: Callable[..., torch.optim.lr_scheduler.LRScheduler] | None = None,
        *,
        tokenizer=None,
        label_smoothing: float = 0.1,
        weight_decay: float = 0.0,
        compile: bool = False,
        bleu_every_n_val: int = 1,
        val_beam_size: int = 1,
        test_beam_size: int = 4,
        length_penalty: float = 0.6,
        max_len_b: int = 50,
        num_logged_translations: int = 4,
    ) -> None:
        """bleu_every_n_val: log val/bleu at every n-th validation during fit (0: never; eval.py always scores it).
        val/test_beam_size: 1 is greedy. length_penalty: GNMT's alpha. max_len_b: translations stop at source length +
        max_len_b tokens. Without a tokenizer only the losses are computed."""
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing}")
        if bleu_every_n_val < 0 or val_beam_size < 1 or test_beam_size < 1:
            raise ValueError("need bleu_every_n_val >= 0, val_beam_size >= 1 and test_beam_size >= 1")
        if getattr(net, "model_type", None) != "transformer":
            raise TypeError(f"the seq2seq task trains an encoder-decoder Transformer, got {type(net).__name__}")
        super().__init__(net, optimizer, scheduler, weight_decay=weight_decay, compile=compile, tokenizer=tokenizer)
        self.pad_id = net.config.pad_token_id
        self.val_loss, self.test_loss = MeanMetric(), MeanMetric()
        self._translations: list[tuple[str, str, str]] = []  # (source, hypothesis, reference)
        self._val_count = 0
        self._score_bleu = False
        # Weights per token of each stack, for the FLOPs estimate (embedding look-ups do no matmul).
        named = dict(net.named_parameters())
        self._encoder_weights = sum(p.numel() for n, p in named.items() if n.startswith("encoder."))
        self._decoder_weights = sum(p.numel() for n, p in named.items() if n.startswith("decoder."))

    def forward(self, src, tgt_in, src_mask=None) -> torch.Tensor:
        return self.net(src, tgt_in, src_mask=src_mask)

    def _loss(self, batch, *, smoothing: float) -> tuple[torch.Tensor, int]:
        """Mean cross-entropy per target token, padding ignored; and the number of target tokens."""
        labels = batch.labels
        # The model's fused output layer + loss: the logits are never materialized (zoo.core.linear_cross_entropy).
        loss = self.net.loss(
            batch.src,
            batch.tgt_in,
            labels,
            src_mask=batch.src_mask,
            ignore_index=self.pad_id,
            label_smoothing=smoothing,
        )
        return loss, int((labels != self.pad_id).sum())

    # ---- training ------------------------------------------------------------------------------------
    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        loss, tokens = self._loss(batch, smoothing=self.hparams.label_smoothing)
        self.log("train/loss", loss, prog_bar=True, batch_size=tokens)  # per target token, whatever is returned
        # Normalised by the target tokens of the whole optimizer step (all ranks, all accumulated micro-batches).
        return self.token_loss(loss, tokens)

    def batch_samples(self, batch) -> int:
        return batch.src.shape[0]

    def batch_items(self, batch) -> int:
        return int(batch.src_mask.sum() + (batch.labels != self.pad_id).sum())  # real tokens of both sides

    def batch_flops(self, batch) -> float:
        """6 FLOPs per weight per token on its side (padding included), the output layer on target tokens, and the
        scores and mixing of the three attentions."""
        c = self.net.config
        (b, s), t = batch.src.shape, batch.tgt_in.shape[1]
        weights = 6 * (self._encoder_weights * b * s + (self._decoder_weights + c.tgt_vocab_size * c.d_model) * b * t)
        attention = 12 * c.d_model * (c.n_encoder_layers * s * b * s + c.n_decoder_layers * (t + s) * b * t)
        return float(weights + attention)

    # ---- evaluation ----------------------------------------------------------------------------------
    def on_validation_epoch_start(self) -> None:
        self._translations = []
        if self.trainer.sanity_checking:
            self._score_bleu = False
            return
        self._val_count += 1
        every = self.hparams.bleu_every_n_val
        during_fit = self.trainer.state.fn == "fit"
        self._score_bleu = self.tokenizer is not None and (
            not during_fit or (every > 0 and self._val_count % every == 0)
        )

    def validation_step(self, batch, batch_idx: int) -> None:
        # The loss is reported without label smoothing: a plain cross-entropy, comparable to perplexity.
        loss, tokens = self._loss(batch, smoothing=0.0)
        self.val_loss.update(loss, weight=tokens)
        if self._score_bleu:
            self._translate(batch, self.hparams.val_beam_size)

    def on_validation_epoch_end(self) -> None:
        loss = self.val_loss.compute()
        self.log("val/loss", loss, prog_bar=True)  # MeanMetric already reduced over ranks
        self.log("val/ppl", torch.exp(loss))
        self.val_loss.reset()
        if self._score_bleu:
            self.log("val/bleu", self._corpus_bleu(), prog_bar=True)
            self._log_translations("val/translations")

    def on_test_epoch_start(self) -> None:
        self._translations = []

    def test_step(self, batch, batch_idx: int) -> None:
        loss, tokens = self._loss(batch, smoothing=0.0)
        self.test_loss.update(loss, weight=tokens)
        if self.tokenizer is not None:
            self._translate(batch, self.hparams.test_beam_size)

    def on_test_epoch_end(self) -> None:
        loss = self.test_loss.compute()
        self.log("test/loss", loss)
        self.log("test/ppl", torch.exp(loss))
        self.test_loss.reset()
        if self.tokenizer is not None:
            self.log("test/bleu", self._corpus_bleu())
            self._log_translations("test/translations")

    def translate_ids(self, src: torch.Tensor, src_mask: torch.Tensor, beam_size: int) -> torch.Tensor:
        max_new = min(self.net.config.max_len, src.shape[1] + self.hparams.max_len_b)
        # Full precision even under bf16 training: bf16 would reorder close beam hypotheses. A network sharded over
        # the ranks gathers its weights at every step, so the ranks step in lockstep until the last is done.
        with torch.autocast(src.device.type, enabled=False):
            return self.net.generate(
                src,
                src_mask,
                max_new_tokens=max_new,
                beam_size=beam_size,
                length_penalty=self.hparams.length_penalty,
                any_running=lockstep(self.net),
            )

    def _translate(self, batch, beam_size: int) -> None:
        out = self.translate_ids(batch.src, batch.src_mask, beam_size)
        for row, source, reference in zip(out, batch.src_text, batch.ref_text):
            self._translations.append((source, self.tokenizer.decode(row.tolist()), reference))

    def _corpus_bleu(self) -> float:
        """sacreBLEU over every rank's translations (each rank decoded its own share of the batches)."""
        pairs = self._translations
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            gathered: list = [None] * dist.get_world_size()
            dist.all_gather_object(gathered, pairs)
            pairs = [p for part in gathered for p in part]
        if not pairs:
            return 0.0
        return sacrebleu.corpus_bleu([h for _, h, _ in pairs], [[r for _, _, r in pairs]]).score

    def _log_translations(self, key: str) -> None:
        n = self.hparams.num_logged_translations
        if n <= 0 or not self.trainer.is_global_zero or not self._translations:
            return
        texts = [f"SRC: {s}\nHYP: {h}\nREF: {r}" for s, h, r in self._translations[:n]]
        log_text(self.loggers, key, texts, self.global_step)
