"""Token-count losses (seq2seq, masked LM) are normalised by the target tokens of the whole optimizer step: a
global batch split over accumulation steps or over DDP ranks, with unequal token counts per part, gives the
gradient of one step of one process on the whole batch (zoo.tasks.token_loss).

The batches are made by hand so that the parts hold very different numbers of target tokens: a mean per part,
averaged over the parts (what DDP and Lightning's accumulation do on their own), gives another gradient.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import socket

import lightning as L
import pytest
import torch
import torch.multiprocessing as mp
from torch.utils.data import DataLoader

from zoo.data.batches import EncoderBatch, TranslationBatch
from zoo.models import BERT, BERTConfig, Transformer
from zoo.tasks import BertPretrainingTask, Seq2SeqTask

VOCAB = 40
SGD = functools.partial(torch.optim.SGD, lr=0.5)


# ---- tasks and hand-made batches ------------------------------------------------------------------------
def seq2seq_task() -> Seq2SeqTask:
    torch.manual_seed(0)
    net = Transformer.from_preset("transformer-tiny", src_vocab_size=VOCAB, max_len=32, dropout=0.0)
    return Seq2SeqTask(net, SGD, label_smoothing=0.1)


def seq2seq_batch(target_lengths: list[int], seed: int, t: int = 7, s: int = 5) -> TranslationBatch:
    """Sources of `s` tokens; targets of the given lengths, padded (id 0) to `t`."""
    g = torch.Generator().manual_seed(seed)
    n = len(target_lengths)
    labels = torch.randint(3, VOCAB, (n, t), generator=g)
    for row, length in enumerate(target_lengths):
        labels[row, length:] = 0
    return TranslationBatch(
        src=torch.randint(3, VOCAB, (n, s), generator=g),
        src_mask=torch.ones(n, s, dtype=torch.long),
        tgt_in=torch.cat([torch.ones(n, 1, dtype=torch.long), labels[:, :-1]], dim=1),
        labels=labels,
    )


def seq2seq_parts() -> list[TranslationBatch]:
    return [seq2seq_batch([7, 6], seed=1), seq2seq_batch([1, 2], seed=2)]  # 13 and 3 target tokens


def bert_task(nsp_weight: float) -> BertPretrainingTask:
    torch.manual_seed(0)
    config = BERTConfig(
        vocab_size=VOCAB,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    return BertPretrainingTask(BERT(config), SGD, nsp_weight=nsp_weight)


def bert_batch(masked: list[list[int]], seed: int, t: int = 8) -> EncoderBatch:
    """One sequence per entry of `masked`: the positions whose token is predicted; the last position is padding."""
    g = torch.Generator().manual_seed(seed)
    n = len(masked)
    ids = torch.randint(5, VOCAB, (n, t), generator=g)
    labels = torch.full((n, t), -100)
    for row, positions in enumerate(masked):
        labels[row, positions] = ids[row, positions]
        ids[row, positions] = 4  # the [MASK] stand-in
    attention = torch.ones(n, t, dtype=torch.long)
    attention[:, -1] = 0
    ids[:, -1] = 0
    return EncoderBatch(
        input_ids=ids,
        token_type_ids=torch.zeros(n, t, dtype=torch.long),
        attention_mask=attention,
        labels=labels,
        nsp_labels=torch.randint(0, 2, (n,), generator=g),
    )


def bert_parts() -> list[EncoderBatch]:
    return [bert_batch([[1, 2, 3], [1, 4, 5]], seed=1), bert_batch([[2], []], seed=2)]  # 6 and 1 masked tokens


def concatenated(parts):
    kind = type(parts[0])
    fields = [f.name for f in dataclasses.fields(kind) if getattr(parts[0], f.name) is not None]
    return kind(**{f: torch.cat([getattr(p, f) for p in parts]) for f in fields})


# ---- the reference: one process, one backward on the whole batch -------------------------------------------
def reference_gradients(kind: str) -> dict[str, torch.Tensor]:
    """Loss of the whole batch as the task defines it (mean per target token; NSP mean per sequence)."""
    if kind == "seq2seq":
        task = seq2seq_task()
        loss, _ = task._loss(concatenated(seq2seq_parts()), smoothing=0.1)
    else:
        task = bert_task(nsp_weight=1.0 if kind == "mlm_nsp" else 0.0)
        _, _, mlm, nsp = task._losses(concatenated(bert_parts()))
        loss = mlm + task.hparams.nsp_weight * nsp
    loss.backward()
    return gradients(task)


def gradients(task) -> dict[str, torch.Tensor]:
    return {name: p.grad.detach().clone() for name, p in task.net.named_parameters() if p.grad is not None}


class GradientsBeforeTheStep(L.Callback):
    """What a callback reading gradients before the optimizer step (a gradient-norm probe, clipping) sees."""

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        self.seen = gradients(pl_module)


def fit_one_step(task, batches, **trainer_options) -> dict[str, torch.Tensor]:
    """One optimizer step over `batches`; returns the gradients a callback saw before the step."""
    probe = GradientsBeforeTheStep()
    trainer = L.Trainer(
        callbacks=[probe],
        accelerator="cpu",
        max_steps=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
        **trainer_options,
    )
    # batch_size=None: the hand-made batches are handed over as they are, in order.
    trainer.fit(task, train_dataloaders=DataLoader(batches, batch_size=None))
    return probe.seen


def assert_same_gradients(got: dict, expected: dict) -> None:
    assert got.keys() == expected.keys()
    for name in expected:
        where = functools.partial("{}: {}".format, name)
        torch.testing.assert_close(got[name], expected[name], rtol=1e-5, atol=1e-6, msg=where)


# ---- (a) gradient accumulation on one device ---------------------------------------------------------------
@pytest.mark.parametrize("kind", ["seq2seq", "mlm"])
def test_two_accumulated_micro_batches_give_the_gradient_of_the_whole_batch(kind):
    task, parts = (seq2seq_task(), seq2seq_parts()) if kind == "seq2seq" else (bert_task(0.0), bert_parts())
    seen_by_callbacks = fit_one_step(task, parts, devices=1, accumulate_grad_batches=2)
    assert task.global_step == 1
    expected = reference_gradients(kind)
    # Lightning zeroes gradients at the start of a window, not after the step: these are the step's gradients.
    assert_same_gradients(gradients(task), expected)
    assert_same_gradients(seen_by_callbacks, expected)  # already corrected when callbacks read them


def test_one_process_without_accumulation_returns_the_plain_mean():
    """Nothing is rescaled there: the returned loss is the task's mean, bit for bit (as before this change)."""
    task = seq2seq_task()
    batch = seq2seq_parts()[1]
    fit_one_step(task, [batch], devices=1)
    expected = reference_gradients_of_one(batch)
    assert all(torch.equal(gradients(task)[name], expected[name]) for name in expected)


def reference_gradients_of_one(batch) -> dict[str, torch.Tensor]:
    task = seq2seq_task()
    task._loss(batch, smoothing=0.1)[0].backward()
    return gradients(task)


# ---- (b) two DDP processes over gloo -----------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ddp_worker(rank: int, kind: str, port: int, out: str) -> None:
    # The environment of an external launcher (torchrun): Lightning joins it instead of launching processes.
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2"
    )
    os.environ["NODE_RANK"] = "0"
    torch.set_num_threads(1)
    if kind == "seq2seq":
        task, parts = seq2seq_task(), seq2seq_parts()
    else:
        task, parts = bert_task(1.0), bert_parts()
    fit_one_step(task, [parts[rank]], devices=2, strategy="ddp", use_distributed_sampler=False)
    torch.save(gradients(task), f"{out}.rank{rank}")


@pytest.mark.parametrize("kind", ["seq2seq", "mlm_nsp"])
def test_two_ddp_processes_with_unequal_tokens_give_the_gradient_of_one_process(kind, tmp_path):
    """Each rank holds one part of the batch (13 vs 3 target tokens; 6 vs 1 masked tokens). NSP, one loss per
    sequence, keeps its mean: the ranks hold equally many sequences, so the mean over ranks is the batch's."""
    out = str(tmp_path / "grads")
    mp.start_processes(_ddp_worker, args=(kind, _free_port(), out), nprocs=2, start_method="spawn")
    expected = reference_gradients(kind)
    for rank in (0, 1):
        assert_same_gradients(torch.load(f"{out}.rank{rank}"), expected)
