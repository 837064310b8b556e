"""The seq2seq task: label-smoothed loss, schedules, BLEU, and an end-to-end memorization check."""

from __future__ import annotations

import math

import pytest
import sacrebleu
import torch
import torch.nn.functional as F

from zoo.data import TranslationTokenizer
from zoo.data.batches import TranslationBatch
from zoo.data.translation import TokenBatches, make_batches, read_lines
from zoo.models import GPT, GPTConfig, Transformer
from zoo.optim.inverse_sqrt import paper_peak_lr, warmup_inverse_sqrt
from zoo.optim.schedules import warmup_cosine
from zoo.tasks import Seq2SeqTask


def tiny_task(vocab: int = 50, **task_options) -> Seq2SeqTask:
    torch.manual_seed(0)
    net = Transformer.from_preset("transformer-tiny", src_vocab_size=vocab, max_len=64, dropout=0.0)
    optimizer = lambda groups: torch.optim.Adam(groups, lr=1e-3, betas=(0.9, 0.98), eps=1e-9)  # noqa: E731
    return Seq2SeqTask(net, optimizer, **task_options)


def random_batch(n=3, s=6, t=5, vocab=50, seed=0) -> TranslationBatch:
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(3, vocab, (n, t), generator=g)
    labels[1, 3:] = 0  # a shorter target, padded
    return TranslationBatch(
        src=torch.randint(3, vocab, (n, s), generator=g),
        src_mask=torch.ones(n, s, dtype=torch.long),
        tgt_in=torch.cat([torch.ones(n, 1, dtype=torch.long), labels[:, :-1]], dim=1),
        labels=labels,
    )


def test_label_smoothed_loss_ignores_padding():
    """The loss is (1 - eps) * NLL + eps * mean over the vocabulary of -log p, averaged over real tokens only;
    padding more columns onto the batch changes nothing."""
    task = tiny_task(label_smoothing=0.1).eval()
    batch = random_batch()
    loss, tokens = task._loss(batch, smoothing=0.1)
    assert tokens == 3 * 5 - 2
    logp = task(batch.src, batch.tgt_in, batch.src_mask).log_softmax(-1)
    real = batch.labels != 0
    nll = -logp.gather(-1, batch.labels[..., None])[..., 0][real]
    uniform = -logp.mean(-1)[real]
    torch.testing.assert_close(loss, (0.9 * nll + 0.1 * uniform).mean())
    padded = TranslationBatch(*(F.pad(v, (0, 4)) for v in (batch.src, batch.src_mask, batch.tgt_in, batch.labels)))
    # pad id 0 everywhere, source mask 0
    torch.testing.assert_close(task._loss(padded, smoothing=0.1)[0], loss, atol=1e-6, rtol=1e-6)


def test_task_refuses_other_models_and_bad_options():
    gpt = GPT(GPTConfig(vocab_size=20, block_size=8, n_layer=1, n_head=2, n_embd=16))
    with pytest.raises(TypeError, match="encoder-decoder Transformer, got GPT"):
        Seq2SeqTask(gpt, None)
    with pytest.raises(ValueError, match="label_smoothing"):
        tiny_task(label_smoothing=1.0)


def test_inverse_sqrt_schedule_is_the_papers_shape():
    opt = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=2e-3)
    sched = warmup_inverse_sqrt(opt, warmup_steps=100)
    lrs = []
    for _ in range(400):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    d = 512  # the paper's formula, scaled so that its peak is the optimizer's lr
    paper = [d**-0.5 * min(s**-0.5, s * 100**-1.5) for s in range(1, 401)]
    scale = 2e-3 / paper_peak_lr(d, 100)
    assert lrs == pytest.approx([p * scale for p in paper], rel=1e-9)
    assert max(lrs) == pytest.approx(2e-3) and lrs.index(max(lrs)) == 99
    assert lrs[399] == pytest.approx(2e-3 * math.sqrt(100 / 400))
    assert paper_peak_lr(512, 4000) == pytest.approx(6.99e-4, rel=1e-3)
    with pytest.raises(ValueError, match="warmup_steps must be positive"):
        warmup_inverse_sqrt(opt, warmup_steps=0)
    assert isinstance(warmup_cosine(opt, warmup_steps=10, max_steps=100), torch.optim.lr_scheduler.LambdaLR)


def test_optimizer_uses_param_groups_and_step_schedule():
    task = tiny_task()
    task.scheduler_factory = lambda opt: warmup_inverse_sqrt(opt, warmup_steps=10)
    config = task.configure_optimizers()
    assert config["lr_scheduler"]["interval"] == "step"
    groups = config["optimizer"].param_groups
    assert sum(p.numel() for g in groups for p in g["params"]) == task.net.num_parameters()
    assert groups[0]["betas"] == (0.9, 0.98) and groups[0]["eps"] == 1e-9


@pytest.fixture(scope="module")
def sentences(data_dir):
    de = read_lines(data_dir / "multi30k" / "train.de.gz")[:600]
    en = read_lines(data_dir / "multi30k" / "train.en.gz")[:600]
    return de, en


def test_memorizes_a_few_pairs_then_translates_them_with_bleu_100(sentences):
    """The whole path (tokenizer, batches, shifted targets, loss, greedy and beam decoding, detokenization,
    sacreBLEU) is consistent: a tiny model trained on 6 Multi30k pairs translates them back exactly."""
    de, en = sentences
    tok = TranslationTokenizer.train(de, en, vocab_size=400, joint=True, source_lang="de", target_lang="en")
    src = [torch.tensor(tok.encode_source(s)).numpy() for s in de[:6]]
    tgt = [torch.tensor(tok.encode_target(s)).numpy() for s in en[:6]]
    lens = torch.tensor([len(x) for x in src]).numpy()
    batches = make_batches(lens, lens, max_tokens=10_000, seed=None)
    batch = TokenBatches(src, tgt, batches, de[:6], en[:6])[0]
    torch.manual_seed(0)
    net = Transformer.from_preset("transformer-tiny", src_vocab_size=tok.src_vocab_size, dropout=0.0, max_len=64)
    task = Seq2SeqTask(
        net,
        lambda g: torch.optim.Adam(g, lr=3e-3, betas=(0.9, 0.98), eps=1e-9),
        tokenizer=tok,
        label_smoothing=0.0,
        length_penalty=0.6,
    )
    optimizer = task.configure_optimizers()
    for _ in range(300):
        loss, _ = task._loss(batch, smoothing=0.0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if loss.item() < 0.01:
            break
    assert loss.item() < 0.05
    for beam in (1, 3):
        out = task.translate_ids(batch.src, batch.src_mask, beam_size=beam)
        hyps = [tok.decode(row.tolist()) for row in out]
        assert hyps == batch.ref_text
        task._translations = list(zip(batch.src_text, hyps, batch.ref_text))
        assert task._corpus_bleu() == pytest.approx(100.0)
    task._translations = [("x", "A dog runs on grass.", "A dog runs in the grass.")]
    expected = sacrebleu.corpus_bleu(["A dog runs on grass."], [["A dog runs in the grass."]]).score
    assert task._corpus_bleu() == pytest.approx(expected) and 0 < expected < 100
