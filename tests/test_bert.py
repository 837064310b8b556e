"""Tests of zoo.models.BERT: preset sizes, config validation, padding invariance, masked-position logits, the tied
decoder, and the pretraining / classification tasks on small inputs."""

from __future__ import annotations

import functools

import pytest
import torch

from zoo.data.batches import EncoderBatch
from zoo.models import BERT, BERTConfig
from zoo.tasks import BertPretrainingTask, SequenceClassificationTask

VOCAB = 97
TOL = dict(atol=1e-5, rtol=1e-5)


def tiny(seed: int = 0, **overrides) -> BERT:
    torch.manual_seed(seed)
    config = (
        dict(
            vocab_size=VOCAB,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=64,
            max_position_embeddings=24,
        )
        | overrides
    )
    return BERT(BERTConfig(**config)).eval()


# --------------------------------------------------------------------------------------------------------------
# Presets and configuration


@pytest.mark.parametrize(
    "name, encoder, with_heads",
    [
        ("bert-base", 109_482_240, 110_106_428),
        ("bert-large", 335_141_888, None),
    ],
)
def test_published_parameter_counts(name, encoder, with_heads):
    """bert-base / bert-large have exactly the published sizes: encoder with pooler, and with the MLM+NSP heads
    (the MLM decoder is tied to the token embeddings, so it adds only its bias)."""
    with torch.device("meta"):
        assert BERT.from_preset(name, head="none").num_parameters() == encoder
        if with_heads is not None:
            assert BERT.from_preset(name, head="pretraining").num_parameters() == with_heads


@pytest.mark.parametrize(
    "name, layers, hidden",
    [("bert-tiny", 2, 128), ("bert-mini", 4, 256), ("bert-small", 4, 512), ("bert-medium", 8, 512)],
)
def test_compact_presets_of_turc_et_al(name, layers, hidden):
    c = BERT.make_config(name)
    assert (c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.intermediate_size) == (
        layers,
        hidden,
        hidden // 64,
        4 * hidden,
    )
    with torch.device("meta"):
        model = BERT.from_preset(name, head="none")
    # 12 H^2 + 13 H per layer (fused qkv + out + 2 feed-forward + 2 norms), embeddings, embedding norm, pooler
    expected = (30522 + 512 + 2) * hidden + 2 * hidden + layers * (12 * hidden**2 + 13 * hidden) + hidden**2 + hidden
    assert model.num_parameters() == expected


def test_unknown_preset_lists_the_presets():
    with pytest.raises(ValueError) as err:
        BERT.from_preset("bert-huge")
    assert "bert-huge" in str(err.value)
    for name in BERT.preset_names():
        assert name in str(err.value)


def test_hidden_not_divisible_by_heads_is_named():
    with pytest.raises(ValueError, match="hidden_size=100 is not divisible by num_attention_heads=12"):
        BERT.from_preset("bert-base", hidden_size=100)


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        (dict(head="mlm"), "unknown head 'mlm'"),
        (dict(hidden_act="swish"), "unknown hidden_act 'swish'"),
        (dict(hidden_dropout_prob=1.5), "hidden_dropout_prob must be in [0, 1)"),
        (dict(pad_token_id=200), "pad_token_id=200 is outside the vocabulary"),
    ],
)
def test_bad_options_are_named(overrides, fragment):
    with pytest.raises(ValueError) as err:
        BERT.from_preset("bert-tiny", vocab_size=VOCAB, **overrides)
    assert fragment in str(err.value)


# --------------------------------------------------------------------------------------------------------------
# Forward pass


@torch.no_grad()
def test_right_padding_does_not_change_real_positions():
    """Padding is masked out of attention: a padded row gives the same hidden states, pooled vector and MLM logits
    at its real positions as the same row alone."""
    model = tiny()
    ids = torch.randint(5, VOCAB, (1, 9))
    segments = torch.tensor([[0] * 5 + [1] * 4])
    alone = model(ids, token_type_ids=segments)
    padded_ids = torch.cat([ids, torch.zeros(1, 6, dtype=torch.long)], 1)
    padded_segments = torch.cat([segments, torch.zeros(1, 6, dtype=torch.long)], 1)
    mask = torch.cat([torch.ones(1, 9), torch.zeros(1, 6)], 1).long()
    padded = model(padded_ids, token_type_ids=padded_segments, attention_mask=mask)
    torch.testing.assert_close(padded.hidden[:, :9], alone.hidden, **TOL)
    torch.testing.assert_close(padded.pooled, alone.pooled, **TOL)
    torch.testing.assert_close(padded.mlm_logits[:, :9], alone.mlm_logits, **TOL)


@torch.no_grad()
def test_encoder_is_bidirectional_and_post_ln():
    """Changing the last token changes the first position's state (no causal mask), and every block output is
    layer-normalized (post-LN: mean 0, unit variance per position before the affine, which starts at 1/0)."""
    model = tiny()
    ids = torch.randint(5, VOCAB, (1, 8))
    changed = ids.clone()
    changed[0, -1] = (ids[0, -1] + 1 - 5) % (VOCAB - 5) + 5
    assert not torch.allclose(model(ids).hidden[0, 0], model(changed).hidden[0, 0])
    hidden = model(ids).hidden
    torch.testing.assert_close(hidden.mean(-1), torch.zeros(1, 8), atol=1e-5, rtol=0)
    torch.testing.assert_close(hidden.var(-1, unbiased=False), torch.ones(1, 8), atol=1e-3, rtol=0)


def test_mlm_decoder_is_tied_to_token_embeddings_with_own_bias():
    model = tiny().train()
    ids = torch.randint(5, VOCAB, (2, 6))
    positions = torch.zeros(2, 6, dtype=torch.bool)
    positions[0, 2] = positions[1, 4] = True
    out = model(ids, mlm_positions=positions)
    assert out.mlm_logits.shape == (2, VOCAB)
    out.mlm_logits.sum().backward()
    assert model.mlm.bias.grad is not None and model.mlm.bias.shape == (VOCAB,)
    # Every vocabulary row gets a gradient through the decoder, not only the looked-up ids.
    unused = torch.ones(VOCAB, dtype=torch.bool)
    unused[ids.flatten()] = False
    unused[model.config.pad_token_id] = False
    assert (model.tok_emb.weight.grad[unused].abs().sum(-1) > 0).all()
    names = [n for n, _ in model.named_parameters()]
    assert not any("decoder" in n for n in names)


@torch.no_grad()
def test_heads_follow_the_config():
    none = tiny(head="none")(torch.randint(5, VOCAB, (2, 5)))
    assert none.mlm_logits is None and none.nsp_logits is None and none.logits is None
    cls = tiny(head="classification", num_labels=3)(torch.randint(5, VOCAB, (2, 5)))
    assert cls.logits.shape == (2, 3) and cls.mlm_logits is None
    pre = tiny()(torch.randint(5, VOCAB, (2, 5)))
    assert pre.mlm_logits.shape == (2, 5, VOCAB) and pre.nsp_logits.shape == (2, 2)


def test_positions_beyond_the_table_fail_clearly():
    with pytest.raises(ValueError, match="maximum context of 24"):
        tiny()(torch.randint(5, VOCAB, (1, 30)))


def test_load_encoder_from_keeps_encoder_and_fresh_classifier():
    source = tiny(seed=1)
    target = tiny(seed=2, head="classification", num_labels=3)
    fresh = target.load_encoder_from(source)
    assert fresh == ["classifier.bias", "classifier.weight"]
    for name, tensor in source.state_dict().items():
        if not name.startswith(("mlm.", "nsp.")):
            assert torch.equal(target.state_dict()[name], tensor), name
    wider = tiny(seed=3, hidden_size=48, head="classification")
    with pytest.raises(ValueError, match="does not fit"):
        wider.load_encoder_from(source)


# --------------------------------------------------------------------------------------------------------------
# Tasks


def _pretraining_batch(seed: int = 0) -> EncoderBatch:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, VOCAB, (4, 12), generator=g)
    labels = torch.full_like(ids, -100)
    labels[:, [2, 7]] = ids[:, [2, 7]]
    ids[:, [2, 7]] = 4  # [MASK]
    mask = torch.ones_like(ids)
    mask[3, 9:] = 0
    return EncoderBatch(
        input_ids=ids,
        token_type_ids=(torch.arange(12) >= 6).long().expand(4, -1).clone(),
        attention_mask=mask,
        labels=labels,
        nsp_labels=torch.tensor([0, 1, 0, 1]),
    )


def test_pretraining_loss_is_mlm_plus_nsp_and_learns():
    """The task's loss equals MLM CE at the masked positions plus NSP CE (computed here from the full logits),
    and a few optimizer steps on one batch lower it."""
    net = tiny().train()
    net.drop = torch.nn.Identity()
    optimizer = functools.partial(torch.optim.AdamW, lr=3e-3)
    task = BertPretrainingTask(net, optimizer)
    batch = _pretraining_batch()
    net.eval()
    with torch.no_grad():
        full = net(batch.input_ids, token_type_ids=batch.token_type_ids, attention_mask=batch.attention_mask)
        selected = batch.labels != -100
        expected = torch.nn.functional.cross_entropy(
            full.mlm_logits[selected], batch.labels[selected]
        ) + torch.nn.functional.cross_entropy(full.nsp_logits, batch.nsp_labels)
        _, _, mlm, nsp = task._losses(batch)
    torch.testing.assert_close(mlm + nsp, expected, **TOL)
    opt = task.configure_optimizers()
    first = None
    for _ in range(30):
        _, _, mlm, nsp = task._losses(batch)
        loss = mlm + nsp
        first = first if first is not None else loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.5 * first


def test_tasks_refuse_the_wrong_head():
    with pytest.raises(ValueError, match="head='pretraining'"):
        BertPretrainingTask(tiny(head="none"), None)
    with pytest.raises(ValueError, match="head='classification'"):
        SequenceClassificationTask(tiny(), None)
