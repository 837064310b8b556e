"""Encoders with causal self-attention (issue 12): BERT `causal`, ViT `causal` (pool="avg"), the Transformer's
`encoder_causal`. An output at position t depends on no later token: changing the tokens after t leaves the
outputs up to t unchanged, while the bidirectional encoder changes them (so the test can fail). BERT's pooled
vector then comes from the last real token.
"""

from __future__ import annotations

import pytest
import torch

from zoo.models import BERT, Transformer, ViT

B, T, VOCAB = 3, 9, 40
CUT = 4  # tokens after position CUT change


def changed_after(ids: torch.Tensor, t: int) -> torch.Tensor:
    other = ids.clone()
    other[:, t + 1 :] = (ids[:, t + 1 :] + 11) % (VOCAB - 3) + 3
    return other


def right_padding() -> torch.Tensor:
    keep = torch.ones(B, T, dtype=torch.long)
    keep[1, 6:] = 0
    keep[2, 3:] = 0
    return keep


def bert(causal: bool, **kw) -> BERT:
    torch.manual_seed(0)
    return BERT.from_preset("bert-tiny", vocab_size=VOCAB, head="classification", causal=causal, **kw).eval()


@torch.no_grad()
@pytest.mark.parametrize(
    "switches",
    [{}, dict(attn_window=4), dict(positions="rope"), dict(norm="batchnorm_masked", ff_inner_norm="layernorm")],
)
@pytest.mark.parametrize("padded", [False, True])
def test_bert_causal_outputs_do_not_depend_on_later_tokens(switches, padded):
    ids = torch.randint(3, VOCAB, (B, T))
    mask = right_padding() if padded else None
    model = bert(True, **switches)
    a = model(ids, attention_mask=mask).hidden
    b = model(changed_after(ids, CUT), attention_mask=mask).hidden
    torch.testing.assert_close(a[:, : CUT + 1], b[:, : CUT + 1], rtol=0, atol=1e-6)
    assert (a[:, CUT + 1 :] - b[:, CUT + 1 :]).abs().max() > 1e-3
    bidirectional = bert(False, **switches)
    a = bidirectional(ids, attention_mask=mask).hidden
    b = bidirectional(changed_after(ids, CUT), attention_mask=mask).hidden
    assert (a[:, :CUT] - b[:, :CUT]).abs().max() > 1e-3


@torch.no_grad()
def test_bert_causal_pools_the_last_real_token():
    ids, keep = torch.randint(3, VOCAB, (B, T)), right_padding()
    model = bert(True)
    out = model(ids, attention_mask=keep)
    last = keep.sum(1) - 1  # right padding: the last real token
    expected = torch.tanh(model.pooler(out.hidden[torch.arange(B), last]))
    torch.testing.assert_close(out.pooled, expected)
    torch.testing.assert_close(out.logits, model.classifier(expected))
    # The padding after it reaches neither the pooled vector nor the logits.
    other = ids.masked_fill(keep == 0, 7)
    torch.testing.assert_close(model(other, attention_mask=keep).logits, out.logits, rtol=0, atol=1e-6)
    # No mask: every token is real and the last position pools; bidirectional BERT keeps [CLS] (position 0).
    out = model(ids)
    torch.testing.assert_close(out.pooled, torch.tanh(model.pooler(out.hidden[:, -1])))
    plain = bert(False)
    out = plain(ids, attention_mask=keep)
    torch.testing.assert_close(out.pooled, torch.tanh(plain.pooler(out.hidden[:, 0])))


@torch.no_grad()
@pytest.mark.parametrize("class_token", [True, False])
def test_vit_causal_patches_do_not_see_later_patches(class_token):
    torch.manual_seed(1)
    model = ViT.from_preset("vit-nano/4", causal=True, pool="avg", class_token=class_token).eval()
    images = torch.randn(2, 3, 32, 32)
    other = images.clone()
    other[:, :, 16:] = torch.randn(2, 3, 16, 32)  # patch rows 4..7 of the 8x8 grid: patches 32..63
    prefix = model.num_prefix_tokens
    a, b = model.forward_features(images), model.forward_features(other)
    torch.testing.assert_close(a[:, : prefix + 32], b[:, : prefix + 32], rtol=0, atol=1e-6)
    assert (a[:, prefix + 32 :] - b[:, prefix + 32 :]).abs().max() > 1e-3
    torch.manual_seed(1)
    bidirectional = ViT.from_preset("vit-nano/4", pool="avg", class_token=class_token).eval()
    a, b = bidirectional.forward_features(images), bidirectional.forward_features(other)
    assert (a[:, : prefix + 32] - b[:, : prefix + 32]).abs().max() > 1e-3


def test_vit_causal_with_the_class_token_pooled_is_refused():
    with pytest.raises(ValueError, match="causal=true with pool='token'.*use pool='avg'") as err:
        ViT.make_config("vit-nano/4", causal=True)
    assert "\n" not in str(err.value)


@torch.no_grad()
@pytest.mark.parametrize("switches", [{}, dict(attn_window=4), dict(norm_first=True, positions="alibi")])
@pytest.mark.parametrize("padded", [False, True])
def test_transformer_causal_encoder_does_not_see_later_source_tokens(switches, padded):
    torch.manual_seed(2)
    model = Transformer.from_preset("transformer-tiny", src_vocab_size=VOCAB, encoder_causal=True, **switches).eval()
    src = torch.randint(3, VOCAB, (B, T))
    mask = right_padding().bool() if padded else None
    a, b = model.encode(src, mask), model.encode(changed_after(src, CUT), mask)
    torch.testing.assert_close(a[:, : CUT + 1], b[:, : CUT + 1], rtol=0, atol=1e-6)
    assert (a[:, CUT + 1 :] - b[:, CUT + 1 :]).abs().max() > 1e-3
    # The decoder still reads the whole (causally encoded) source, and translation runs.
    out = model.generate(src, mask, max_new_tokens=4)
    assert out.shape == (B, 4)
    torch.manual_seed(2)
    bidirectional = Transformer.from_preset("transformer-tiny", src_vocab_size=VOCAB, **switches).eval()
    a, b = bidirectional.encode(src, mask), bidirectional.encode(changed_after(src, CUT), mask)
    assert (a[:, :CUT] - b[:, :CUT]).abs().max() > 1e-3


def test_a_switch_on_net_that_the_pretrained_encoder_lacks_is_a_one_line_error(tmp_path):
    """Fine-tuning takes the encoder's architecture from the checkpoint; `net`'s causal=true would be dropped."""
    from zoo.interop import save_hf
    from zoo.tasks import SequenceClassificationTask

    save_hf(BERT.from_preset("bert-tiny", vocab_size=VOCAB), tmp_path)
    task = SequenceClassificationTask(bert(False), pretrained=str(tmp_path))
    assert not task.net.config.causal and task.net.config.vocab_size == VOCAB
    with pytest.raises(ValueError, match="model.net sets causal=True but the pretrained encoder .* has causal=False"):
        SequenceClassificationTask(bert(True), pretrained=str(tmp_path))
