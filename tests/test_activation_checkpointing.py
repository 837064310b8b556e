"""Activation checkpointing (`model.net.activation_checkpointing=true`): every core Block's forward runs again in the
backward pass instead of keeping its activations.

Checked here: the loss and every parameter's gradient are bit-identical with and without it in all four models
(dropout on, padding masks, the Transformer's encoder and decoder stacks), and the checkpoint really runs once per
block; BatchNorm's running statistics are updated once, not again by the recomputation; far fewer tensors are kept
for the backward pass; nothing changes without gradients or with a KV cache; it is a compute option, not a lab
switch, and leaves the weights' names alone; `train.py` trains with it bit-identically and resumes across it both
ways.
"""

from __future__ import annotations

import csv
import shutil

import pytest
import torch
from torch.utils.checkpoint import checkpoint as torch_checkpoint

import zoo.core.block
from zoo.core import KVCache
from zoo.models import BERT, GPT, Transformer, ViT

from conftest import QUIET_SHORT_RUN, assert_ok, run_script

VOCAB = 40


def _ids(shape, seed):
    return torch.randint(3, VOCAB, shape, generator=torch.Generator().manual_seed(seed))


def _gpt(**options):
    return GPT.from_preset("gpt-nano", vocab_size=VOCAB, dropout=0.1, **options)


def _gpt_loss(model):
    ids = _ids((2, 12), 1)
    keep = torch.ones_like(ids)
    keep[1, :3] = 0  # left padding
    return model.loss(ids, ids, attention_mask=keep)


def _bert(**options):
    return BERT.from_preset("bert-tiny", vocab_size=VOCAB, **options)  # dropout 0.1 on hidden states and weights


def _bert_loss(model):
    ids = _ids((2, 12), 2)
    keep = torch.ones_like(ids)
    keep[0, -4:] = 0  # right padding
    out = model(ids, attention_mask=keep)
    return out.mlm_logits.logsumexp(-1).mean() + out.nsp_logits.logsumexp(-1).mean()


def _transformer(**options):
    dropouts = dict(attn_dropout=0.1, ff_dropout=0.1)  # and dropout 0.1, the preset's
    return Transformer.from_preset("transformer-tiny", src_vocab_size=VOCAB, **dropouts, **options)


def _transformer_loss(model):
    src, tgt = _ids((2, 10), 3), _ids((2, 8), 4)
    src_mask = torch.ones_like(src)
    src_mask[1, -3:] = 0
    return model.loss(src, tgt[:, :-1], tgt[:, 1:], src_mask=src_mask, label_smoothing=0.1)


def _vit(**options):
    return ViT.from_preset("vit-nano/4", dropout=0.1, attn_dropout=0.1, **options)


def _vit_loss(model):
    images = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(5))
    return torch.nn.functional.cross_entropy(model(images), torch.tensor([0, 3, 7, 9]))


MODELS = {
    "gpt": (_gpt, _gpt_loss, 2),  # builder, loss, how many blocks the checkpoint wraps
    "bert": (_bert, _bert_loss, 2),
    "transformer": (_transformer, _transformer_loss, 4),  # 2 encoder + 2 decoder blocks
    "vit": (_vit, _vit_loss, 4),
}


@pytest.fixture
def checkpoint_calls(monkeypatch) -> list[int]:
    """Counts the blocks run through torch's checkpoint (it is still torch's that runs)."""
    calls = []

    def counted(function, *args, **kwargs):
        calls.append(1)
        assert kwargs["use_reentrant"] is False
        return torch_checkpoint(function, *args, **kwargs)

    monkeypatch.setattr(zoo.core.block, "checkpoint", counted)
    return calls


def _train_step(build, loss_fn, **options):
    """The loss, every parameter's gradient and every buffer after one training forward and backward."""
    torch.manual_seed(0)
    model = build(**options).train()
    torch.manual_seed(1)  # the dropout masks
    loss = loss_fn(model)
    loss.backward()
    grads = {name: p.grad for name, p in model.named_parameters()}
    return loss.detach(), grads, {name: b.clone() for name, b in model.named_buffers()}


@pytest.mark.parametrize("kind", list(MODELS))
def test_loss_and_every_gradient_are_bit_identical(kind, checkpoint_calls):
    build, loss_fn, blocks = MODELS[kind]
    loss, grads, _ = _train_step(build, loss_fn)
    assert not checkpoint_calls
    loss_ckpt, grads_ckpt, _ = _train_step(build, loss_fn, activation_checkpointing=True)
    assert len(checkpoint_calls) == blocks  # every block of every stack, once in the forward pass
    assert torch.equal(loss, loss_ckpt)
    assert grads.keys() == grads_ckpt.keys()
    for name, grad in grads.items():
        assert grad is not None and torch.equal(grad, grads_ckpt[name]), name


@pytest.mark.parametrize(
    "build, loss_fn",
    [
        (lambda **kw: _vit(norm="batchnorm", ff_inner_norm="batchnorm", **kw), _vit_loss),  # BN-ViT
        (lambda **kw: _bert(norm="batchnorm_masked", **kw), _bert_loss),  # statistics over real tokens only
    ],
)
def test_batchnorm_running_statistics_are_updated_once(build, loss_fn):
    """The recomputation runs BatchNorm in training mode a second time; its running statistics stay as the first
    forward left them, so they equal the run without checkpointing."""
    loss, grads, buffers = _train_step(build, loss_fn)
    loss_ckpt, grads_ckpt, buffers_ckpt = _train_step(build, loss_fn, activation_checkpointing=True)
    assert torch.equal(loss, loss_ckpt) and all(torch.equal(g, grads_ckpt[n]) for n, g in grads.items())
    assert any("running_mean" in name for name in buffers)
    for name, value in buffers.items():
        assert torch.equal(value, buffers_ckpt[name]), name


def _bytes_kept_for_backward(model, loss_fn) -> int:
    kept = []

    def pack(t):
        kept.append(t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss_fn(model)
    return sum(kept)


def test_far_fewer_tensors_are_kept_for_the_backward_pass():
    """What the autograd graph holds between forward and backward (the activation memory): each block's input
    instead of everything each block computed."""
    torch.manual_seed(0)
    plain = _bytes_kept_for_backward(_gpt().train(), _gpt_loss)
    checkpointed = _bytes_kept_for_backward(_gpt(activation_checkpointing=True).train(), _gpt_loss)
    assert checkpointed < plain / 4


@torch.no_grad()
def test_nothing_is_recomputed_without_gradients(checkpoint_calls):
    model = _gpt(activation_checkpointing=True).eval()
    model.generate(_ids((2, 4), 6), 5, temperature=0)
    _gpt_loss(model)
    assert not checkpoint_calls


def test_a_kv_cache_is_never_checkpointed(checkpoint_calls):
    """A second forward would append the keys and values to the cache again: with a cache the blocks run plainly,
    even where gradients are on, and decode as the full forward does."""
    model = _gpt(activation_checkpointing=True).eval()
    ids = _ids((2, 9), 7)
    cache = KVCache(model.config.n_layer)
    steps = [model(ids[:, :5], cache=cache)] + [model(ids[:, i : i + 1], cache=cache) for i in range(5, 9)]
    assert not checkpoint_calls
    torch.testing.assert_close(torch.cat(steps, 1), model(ids), atol=1e-5, rtol=1e-5)
    assert len(checkpoint_calls) == model.config.n_layer  # the full forward, with gradients, is checkpointed


def test_a_compute_option_not_a_switch_with_the_same_weights():
    """Not a change of architecture (no lab switch, nothing to refuse on export), the same weight names both ways,
    and a config recorded before the option existed builds a model without it."""
    for build in (_gpt, _bert, _transformer, _vit):
        plain, checkpointed = build(), build(activation_checkpointing=True)
        assert checkpointed.nondefault_switches() == {}
        assert checkpointed.config.activation_checkpointing and not plain.config.activation_checkpointing
        plain.load_state_dict(checkpointed.state_dict())
        checkpointed.load_state_dict(plain.state_dict())
    recorded = {k: v for k, v in _gpt().config_dict().items() if k != "activation_checkpointing"}
    assert GPT.from_config_dict(recorded).blocks.activation_checkpointing is False
    stacks = _transformer(activation_checkpointing=True)
    assert stacks.encoder.activation_checkpointing and stacks.decoder.activation_checkpointing


# ---- train.py: trains bit-identically, and resumes across the option both ways ----------------------------------

RUN = [
    *QUIET_SHORT_RUN,
    "model.net.name=gpt-nano",
    "model.net.dropout=0.1",
    "trainer.max_steps=8",
    "model.scheduler.max_steps=8",
    "trainer.deterministic=true",
    "trainer.log_every_n_steps=1",
    "logger=csv",
    "seed=7",
    "optimized_metric=null",
    "+callbacks.every_4._target_=lightning.pytorch.callbacks.ModelCheckpoint",
    "+callbacks.every_4.save_top_k=-1",
    "+callbacks.every_4.every_n_train_steps=4",
]


def _losses(run_dir) -> dict[int, str]:
    with open(run_dir / "csv" / "metrics.csv") as f:
        return {int(r["step"]): r["train/loss"] for r in csv.DictReader(f) if r.get("train/loss")}


def _train(run_dir, checkpointing: bool, resume_from=None):
    args = [*RUN, f"hydra.run.dir={run_dir}", f"model.net.activation_checkpointing={str(checkpointing).lower()}"]
    if resume_from is not None:
        args.append(f"ckpt_path={resume_from}")
    assert_ok(run_script("train.py", *args))
    return _losses(run_dir)


def _step_4(run_dir, tmp_path, name):
    (written,) = run_dir.rglob("*step=4.ckpt")
    return shutil.copy(written, tmp_path / f"{name}.ckpt")  # "=" has a meaning in an override


@pytest.mark.slow
def test_train_py_trains_with_it_and_resumes_across_it_both_ways(tmp_path):
    """8 steps with and without the option give the same losses to the bit (dropout on); a step-4 checkpoint
    written without it resumes with it, and one written with it resumes without it, each continuing the same
    losses."""
    plain = _train(tmp_path / "plain", False)
    checkpointed = _train(tmp_path / "checkpointed", True)
    assert sorted(plain) == list(range(8)) and checkpointed == plain
    from_plain = _train(tmp_path / "from_plain", True, _step_4(tmp_path / "plain", tmp_path, "plain_4"))
    from_checkpointed = _train(tmp_path / "from_ckpt", False, _step_4(tmp_path / "checkpointed", tmp_path, "ckpt_4"))
    assert sorted(from_plain) == list(range(4, 8))
    assert from_plain == from_checkpointed == {s: plain[s] for s in range(4, 8)}

    from zoo.tasks import ZooTask

    (last,) = (tmp_path / "checkpointed").rglob("last.ckpt")
    task = ZooTask.load_from_checkpoint(last)  # recorded with the option: evaluation rebuilds it as trained
    assert task.net.config.activation_checkpointing and task.net.blocks.activation_checkpointing
