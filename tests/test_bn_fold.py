"""zoo.core.bn_fold: inference-mode BatchNorms merged into the neighbouring linear layers give the same logits.

The BatchNorms get random running statistics and affine parameters (a fresh BatchNorm is the identity in eval
mode, which any fold would pass), and the outputs are scaled up to order one so that 1e-5 means something.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from zoo.core import TokenBatchNorm
from zoo.core.bn_fold import fold_batchnorms, fold_into_next, fold_into_previous
from zoo.models import BERT, GPT, Transformer, ViT

TOL = dict(atol=1e-5, rtol=1e-5)


@torch.no_grad()
def randomize_batchnorms(model: nn.Module, seed: int = 0) -> nn.Module:
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm1d):
            d = m.num_features
            m.running_mean.copy_(torch.randn(d, generator=g))
            m.running_var.copy_(torch.rand(d, generator=g) + 0.5)
            m.weight.copy_(1 + 0.5 * torch.randn(d, generator=g))
            m.bias.copy_(0.5 * torch.randn(d, generator=g))
    return model.eval()


def batchnorms(model: nn.Module) -> int:
    return sum(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


@torch.no_grad()
def test_fold_into_next_and_previous_match_the_sequence():
    torch.manual_seed(0)
    x = torch.randn(5, 7, 6)
    for bias in (True, False):
        bn = randomize_batchnorms(TokenBatchNorm(6))
        after = nn.Linear(6, 4, bias=bias)
        expected = after(bn(x))
        fold_into_next(bn, after)
        torch.testing.assert_close(after(x), expected, **TOL)
        before = nn.Linear(3, 6, bias=bias)
        y = torch.randn(5, 7, 3)
        expected = bn(before(y))
        fold_into_previous(before, bn)
        torch.testing.assert_close(before(y), expected, **TOL)


@torch.no_grad()
@pytest.mark.parametrize(
    "switches",
    [
        dict(norm="batchnorm", ff_inner_norm="batchnorm"),  # BN-ViT
        dict(norm="batchnorm", ff_inner_norm="batchnorm", pool="avg", class_token=False),
        dict(norm="batchnorm_masked", qk_proj="shared"),
        dict(norm="batchnorm", qk_proj="none"),  # nothing to fold norm1 into: it stays
    ],
)
def test_bn_vit_folds_to_the_same_logits_without_batchnorms(switches):
    torch.manual_seed(1)
    model = randomize_batchnorms(ViT.from_preset("vit-nano/4", **switches))
    nn.init.normal_(model.head.weight, std=1.0)  # logits of order one
    images = torch.randn(4, 3, 32, 32)
    expected = model(images)
    before = batchnorms(model)
    folded = fold_batchnorms(model)
    assert expected.abs().max() > 0.5
    torch.testing.assert_close(folded(images), expected, **TOL)
    assert batchnorms(model) == before  # the original keeps its BatchNorms
    left = model.config.depth if switches.get("qk_proj") == "none" else 0
    assert batchnorms(folded) == left and folded.folded_batchnorms == before - left
    assert not folded.training


@torch.no_grad()
def test_gpt_without_biases_gets_folded_biases():
    torch.manual_seed(2)
    model = randomize_batchnorms(
        GPT.from_preset("gpt-nano", vocab_size=30, bias=False, norm="batchnorm", ff_inner_norm="batchnorm")
    )
    ids = torch.randint(0, 30, (3, 11))
    expected = model(ids)
    folded = fold_batchnorms(model)
    torch.testing.assert_close(folded(ids), expected, **TOL)
    # The final norm feeds the tied output matrix, which is also the input embedding: it stays.
    assert batchnorms(folded) == 1 and folded.blocks.layers[0].self_attn.qkv.bias is not None


@torch.no_grad()
def test_pre_ln_transformer_folds_cross_attention_queries():
    torch.manual_seed(3)
    model = Transformer.from_preset(
        "transformer-tiny", src_vocab_size=30, norm_first=True, norm="batchnorm", ff_inner_norm="batchnorm"
    )
    randomize_batchnorms(model)
    src, tgt = torch.randint(3, 30, (2, 9)), torch.randint(3, 30, (2, 6))
    expected = model(src, tgt)
    folded = fold_batchnorms(model)
    # These logits reach ~35 (tied, sqrt(d)-scaled embeddings): float32 itself is only 1e-5-exact relative to that.
    torch.testing.assert_close(folded(src, tgt), expected, atol=1e-5 * float(expected.abs().max()), rtol=0)
    # A float64 model folds exactly up to float64 rounding: what float32 leaves is its own rounding, not the fold's.
    model = model.double()
    folded = fold_batchnorms(model)
    torch.testing.assert_close(folded(src, tgt), model(src, tgt), atol=1e-11, rtol=1e-11)
    assert all(isinstance(layer.norm_cross, nn.Identity) for layer in folded.decoder.layers)
    assert batchnorms(folded) == 2  # the two final norms, which no linear layer reads directly


@torch.no_grad()
def test_post_ln_bert_folds_only_the_ffn_inner_norm():
    """Post-LN norms also feed the skip path: folding them into the next layer would be wrong, so they stay."""
    torch.manual_seed(4)
    model = BERT.from_preset(
        "bert-tiny", vocab_size=30, head="classification", norm="batchnorm", ff_inner_norm="batchnorm"
    )
    randomize_batchnorms(model)
    nn.init.normal_(model.classifier.weight, std=1.0)
    ids = torch.randint(1, 30, (3, 8))
    expected = model(ids).logits
    folded = fold_batchnorms(model)
    torch.testing.assert_close(folded(ids).logits, expected, **TOL)
    assert folded.folded_batchnorms == 2 and batchnorms(folded) == batchnorms(model) - 2


def test_batchnorm_without_running_statistics_is_refused():
    model = nn.Sequential()
    bn = TokenBatchNorm(4, track_running_stats=False)
    with pytest.raises(ValueError, match="track_running_stats=False"):
        fold_into_next(bn, nn.Linear(4, 2))
    assert batchnorms(fold_batchnorms(model)) == 0
