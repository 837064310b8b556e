"""Tests of zoo.models.Transformer: presets, config validation, and parity with torch.nn.Transformer."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from zoo.models import MODEL_TYPES, Transformer, TransformerConfig

VOCAB, D, HEADS, FF = 53, 32, 4, 64


def tiny(seed: int = 0, **overrides) -> Transformer:
    torch.manual_seed(seed)
    config = (
        dict(
            src_vocab_size=VOCAB,
            d_model=D,
            n_heads=HEADS,
            d_ff=FF,
            n_encoder_layers=2,
            n_decoder_layers=2,
            dropout=0.0,
            max_len=40,
        )
        | overrides
    )
    return Transformer(TransformerConfig(**config)).eval()


# --------------------------------------------------------------------------------------------------------------
# Presets and configuration


def test_base_preset_body_has_the_published_parameter_count():
    """transformer-base: 6+6 layers, d 512, ff 2048 with final norms is 44,140,544 parameters + embeddings."""
    with torch.device("meta"):
        model = Transformer.from_preset("transformer-base", src_vocab_size=37000)
    assert model.num_parameters() == 44_140_544 + 37000 * 512  # one shared embedding/output matrix
    with torch.device("meta"):
        separate = Transformer.from_preset(
            "transformer-base", src_vocab_size=1000, tgt_vocab_size=900, share_embeddings=False, tie_output=False
        )
    assert separate.num_parameters() == 44_140_544 + (1000 + 900 + 900) * 512


def test_big_preset_sizes():
    c = Transformer.make_config("transformer-big")
    assert (c.d_model, c.d_ff, c.n_heads, c.n_encoder_layers, c.n_decoder_layers, c.dropout) == (
        1024,
        4096,
        16,
        6,
        6,
        0.3,
    )
    assert Transformer.model_type in MODEL_TYPES


def test_shared_embeddings_are_one_matrix():
    model = tiny()
    assert model.src_emb is model.tgt_emb and model.out_proj is None
    logits = model(torch.tensor([[5, 6, 2]]), torch.tensor([[1, 7]]))
    h = torch.randn(3, D)
    torch.testing.assert_close(model.tgt_emb.logits(h), h @ model.src_emb.weight.t())
    assert logits.shape == (1, 2, VOCAB)


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        (dict(d_model=30, n_heads=4), "d_model=30 is not divisible by n_heads=4"),
        (dict(tgt_vocab_size=40), "share_embeddings=false"),
        (dict(dropout=1.0), "dropout must be in [0, 1)"),
        (dict(activation="swish"), "unknown activation 'swish'"),
        (dict(eos_token_id=VOCAB), "eos_token_id=53 is outside the vocabulary"),
    ],
)
def test_bad_config_names_the_option(overrides, fragment):
    with pytest.raises(ValueError) as info:
        tiny(**overrides)
    assert fragment in str(info.value)


def test_unknown_preset_and_option():
    with pytest.raises(ValueError, match="transformer-base"):
        Transformer.from_preset("transformer-huge")
    with pytest.raises(ValueError, match="unknown Transformer option 'n_layers'"):
        Transformer.from_preset("transformer-tiny", n_layers=3)


def test_decoder_is_causal_and_encoder_is_bidirectional():
    """Changing target token 3 leaves the logits at positions 0..2 unchanged; changing the last source token
    changes the logits at position 0."""
    model = tiny()
    src, tgt = torch.randint(3, VOCAB, (1, 6)), torch.randint(3, VOCAB, (1, 6))
    out = model(src, tgt)
    tgt2 = tgt.clone()
    tgt2[0, 3] = (tgt[0, 3] + 1) % VOCAB
    out2 = model(src, tgt2)
    torch.testing.assert_close(out[:, :3], out2[:, :3])
    assert not torch.allclose(out[:, 3:], out2[:, 3:])
    src2 = src.clone()
    src2[0, -1] = (src[0, -1] + 1) % VOCAB
    assert not torch.allclose(model(src2, tgt)[:, 0], out[:, 0])


def test_source_padding_is_masked():
    """A right-padded source gives the same logits as the unpadded source, whatever the padding token."""
    model = tiny()
    src, tgt = torch.randint(3, VOCAB, (1, 5)), torch.randint(3, VOCAB, (1, 4))
    alone = model(src, tgt)
    for pad in (0, 17):
        padded = torch.cat([src, torch.full((1, 3), pad)], dim=1)
        mask = torch.tensor([[1] * 5 + [0] * 3])
        torch.testing.assert_close(model(padded, tgt, src_mask=mask), alone, atol=1e-5, rtol=1e-5)


def test_source_longer_than_max_len_is_rejected():
    model = tiny()
    with pytest.raises(ValueError, match="beyond the model's maximum context of 40"):
        model.encode(torch.ones(1, 41, dtype=torch.long))


# --------------------------------------------------------------------------------------------------------------
# Parity with torch.nn.Transformer


def copy_torch_weights(model: Transformer, ref: nn.Transformer) -> None:
    """Load torch.nn.Transformer's weights into zoo's Transformer (the embeddings are shared separately)."""

    def attn(dst, src, cross: bool):
        w, b = src.in_proj_weight, src.in_proj_bias
        if cross:  # zoo: q and a fused kv; torch: one in_proj of [q; k; v]
            dst.q.weight.copy_(w[:D]), dst.q.bias.copy_(b[:D])
            dst.kv.weight.copy_(w[D:]), dst.kv.bias.copy_(b[D:])
        else:
            dst.qkv.weight.copy_(w), dst.qkv.bias.copy_(b)
        dst.out.weight.copy_(src.out_proj.weight), dst.out.bias.copy_(src.out_proj.bias)

    def norm(dst, src):
        dst.weight.copy_(src.weight), dst.bias.copy_(src.bias)

    def ff(dst, src):
        dst.fc1.weight.copy_(src.linear1.weight), dst.fc1.bias.copy_(src.linear1.bias)
        dst.fc2.weight.copy_(src.linear2.weight), dst.fc2.bias.copy_(src.linear2.bias)

    with torch.no_grad():
        for ours, theirs in zip(model.encoder.layers, ref.encoder.layers):
            attn(ours.self_attn, theirs.self_attn, cross=False)
            norm(ours.norm1, theirs.norm1), norm(ours.norm2, theirs.norm2), ff(ours.ff, theirs)
        for ours, theirs in zip(model.decoder.layers, ref.decoder.layers):
            attn(ours.self_attn, theirs.self_attn, cross=False)
            attn(ours.cross_attn, theirs.multihead_attn, cross=True)
            norm(ours.norm1, theirs.norm1), norm(ours.norm_cross, theirs.norm2), norm(ours.norm2, theirs.norm3)
            ff(ours.ff, theirs)
        norm(model.encoder.final_norm, ref.encoder.norm)
        norm(model.decoder.final_norm, ref.decoder.norm)


class TorchReference(nn.Module):
    """torch.nn.Transformer with the same embeddings, sinusoidal positions and tied output layer as zoo's."""

    def __init__(self, ours: Transformer, norm_first: bool) -> None:
        super().__init__()
        self.ours = ours
        self.body = nn.Transformer(D, HEADS, 2, 2, FF, dropout=0.0, batch_first=True, norm_first=norm_first)

    def forward(self, src, tgt, src_keep, tgt_keep):
        emb = lambda ids: self.ours.src_emb(ids) + self.ours.pos_emb(torch.arange(ids.shape[1]))[None]  # noqa: E731
        causal = torch.ones(tgt.shape[1], tgt.shape[1], dtype=torch.bool).triu(1)  # torch: True = masked
        h = self.body(
            emb(src),
            emb(tgt),
            tgt_mask=causal,
            tgt_is_causal=True,
            src_key_padding_mask=~src_keep.bool(),
            tgt_key_padding_mask=~tgt_keep.bool(),
            memory_key_padding_mask=~src_keep.bool(),
        )
        return self.ours.src_emb.logits(h)


@pytest.mark.parametrize("norm_first", [False, True])
def test_parity_with_torch_nn_transformer(norm_first):
    """Same weights, padding on both sides and a causal target mask: logits agree within 1e-5 at every real
    target position (positions after a target's end are padding, never used)."""
    model = tiny(norm_first=norm_first)
    ref = TorchReference(model, norm_first).eval()
    with torch.no_grad():  # perturb every weight, norms and biases too, so that a mis-wired copy shows
        for p in ref.body.parameters():
            p.add_(0.1 * torch.randn_like(p))
    copy_torch_weights(model, ref.body)
    g = torch.Generator().manual_seed(3)
    src, tgt = torch.randint(3, VOCAB, (3, 9), generator=g), torch.randint(3, VOCAB, (3, 7), generator=g)
    src_keep = torch.tensor([[1] * 9, [1] * 6 + [0] * 3, [1] * 4 + [0] * 5])
    tgt_keep = torch.tensor([[1] * 7, [1] * 5 + [0] * 2, [1] * 2 + [0] * 5])
    src, tgt = src.masked_fill(src_keep == 0, 0), tgt.masked_fill(tgt_keep == 0, 0)
    expected = ref(src, tgt, src_keep, tgt_keep)
    for keep in (tgt_keep, None):  # an explicit target mask, or right padding left to causality
        got = model(src, tgt, src_mask=src_keep, tgt_mask=keep)
        real = tgt_keep.bool()
        torch.testing.assert_close(got[real], expected[real], atol=1e-5, rtol=1e-5)
    # The encoders agree at every real source position too.
    memory = model.encode(src, src_keep)
    ref_memory = ref.body.encoder(
        model.src_emb(src) + model.pos_emb(torch.arange(9))[None], src_key_padding_mask=~src_keep.bool()
    )
    torch.testing.assert_close(memory[src_keep.bool()], ref_memory[src_keep.bool()], atol=1e-5, rtol=1e-5)


def test_pre_ln_differs_from_post_ln():
    """norm_first really changes the wiring: same weights, different outputs."""
    post, pre = tiny(norm_first=False), tiny(norm_first=True)
    pre.load_state_dict(post.state_dict())
    src, tgt = torch.randint(3, VOCAB, (2, 5)), torch.randint(3, VOCAB, (2, 4))
    assert not torch.allclose(post(src, tgt), pre(src, tgt), atol=1e-3)


def test_training_mode_applies_dropout():
    model = tiny(dropout=0.3).train()
    src, tgt = torch.randint(3, VOCAB, (2, 5)), torch.randint(3, VOCAB, (2, 4))
    assert not torch.allclose(model(src, tgt), model(src, tgt))


def test_loss_with_targets_equals_smoothed_cross_entropy_of_logits():
    """The fused output layer + loss equals F.cross_entropy of the logits with label smoothing and padding."""
    src, tgt = torch.randint(3, VOCAB, (2, 7)), torch.randint(3, VOCAB, (2, 6))
    labels = torch.randint(3, VOCAB, (2, 6))
    labels[1, 4:] = 0

    def loss_and_grads(fused: bool):
        model = tiny()
        if fused:
            loss = model.loss(src, tgt, labels, ignore_index=0, label_smoothing=0.1)
        else:
            logits = model(src, tgt)
            loss = nn.functional.cross_entropy(
                logits.reshape(-1, VOCAB), labels.reshape(-1), ignore_index=0, label_smoothing=0.1
            )
        loss.backward()
        return loss.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}

    (fused, fused_grads), (plain, plain_grads) = loss_and_grads(True), loss_and_grads(False)
    torch.testing.assert_close(fused, plain, atol=1e-5, rtol=1e-5)
    assert fused_grads.keys() == plain_grads.keys()
    for name, grad in plain_grads.items():
        torch.testing.assert_close(fused_grads[name], grad, atol=1e-5, rtol=1e-5, msg=name)
