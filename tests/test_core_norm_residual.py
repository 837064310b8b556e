"""The block's switches (issue 12): norm, ff_inner_norm, residual_attn / residual_ff.

Checked against formulas written out here: masked BatchNorm's statistics are those of the real tokens only and
padding reaches no real token; naive BatchNorm does see the padding (so the masked test could fail); residual off
removes exactly the skip paths; norm="none" leaves no norm parameters; explicit defaults change nothing. (Bad
values and the YAML list of every switch are tested once for all switches, in test_core_switches.py.)
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from zoo.core import Block, MaskedTokenBatchNorm, TokenBatchNorm, make_norm
from zoo.models import BERT, GPT, Transformer, ViT

D, H, B, T = 32, 4, 3, 7
VOCAB = 30


def padding_mask() -> torch.Tensor:
    keep = torch.ones(B, T, dtype=torch.bool)
    keep[0, 4:] = False  # right padding
    keep[2, 2:] = False
    return keep


# --------------------------------------------------------------------------------------------------------------
# Masked BatchNorm


def test_masked_batchnorm_statistics_are_those_of_the_real_tokens():
    torch.manual_seed(0)
    x, keep = torch.randn(B, T, D) * 3 + 1, padding_mask()
    x[~keep] = 100.0  # padding far away: any leak shows
    real = x[keep]
    masked, naive = MaskedTokenBatchNorm(D, momentum=1.0), TokenBatchNorm(D, momentum=1.0)
    out = masked.train()(x, keep)
    naive.train()(x)
    torch.testing.assert_close(masked.running_mean, real.mean(0))
    torch.testing.assert_close(masked.running_var, real.var(0, unbiased=True))
    expected = (real - real.mean(0)) / torch.sqrt(real.var(0, unbiased=False) + masked.eps)
    torch.testing.assert_close(out[keep], expected)
    assert (out[~keep] == 0).all()
    # The naive one pools over every position, padding included.
    torch.testing.assert_close(naive.running_mean, x.reshape(-1, D).mean(0))
    assert (naive.running_mean - masked.running_mean).abs().min() > 10
    # Without padding the two agree; in eval mode both apply the running statistics to every real token.
    torch.testing.assert_close(masked(x[2:3, :2].expand(4, 2, D).contiguous(), None), naive(x[2:3, :2].expand(4, 2, D)))
    masked.eval()
    torch.testing.assert_close(masked(x, keep)[keep], F.batch_norm(real, masked.running_mean, masked.running_var))


def _change_padding(ids: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    other = ids.clone()
    other[~keep] = (ids[~keep] + 7) % (VOCAB - 3) + 3
    return other


@pytest.mark.parametrize("where", ["norm", "ff_inner_norm"])
def test_padding_reaches_no_real_token_with_masked_batchnorm_in_bert(where):
    """Training mode (batch statistics): the padded tokens' ids change, no real token's output does, nor the
    running statistics. The same with naive BatchNorm changes the real outputs."""
    keep = padding_mask()
    ids = torch.randint(3, VOCAB, (B, T))
    other = _change_padding(ids, keep)

    def run(kind, tokens):
        torch.manual_seed(1)
        switch = {where: kind}
        model = BERT.from_preset(
            "bert-tiny", vocab_size=VOCAB, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **switch
        ).train()
        hidden = model(tokens, attention_mask=keep.long()).hidden
        stats = [m.running_mean.clone() for m in model.modules() if isinstance(m, nn.BatchNorm1d)]
        return hidden, stats

    (a, sa), (b, sb) = run("batchnorm_masked", ids), run("batchnorm_masked", other)
    torch.testing.assert_close(a[keep], b[keep], rtol=0, atol=1e-6)
    assert sa and all(torch.allclose(x, y, atol=1e-7) for x, y in zip(sa, sb))
    (a, _), (b, _) = run("batchnorm", ids), run("batchnorm", other)
    assert (a[keep] - b[keep]).abs().max() > 1e-3


def test_without_padding_masked_and_naive_batchnorm_are_the_same_model():
    """Character windows have no padding: the masked BatchNorm pools exactly the tokens the naive one does, in
    training (batch statistics, running estimates) and in eval. (The lab's norm_text therefore runs no masked arm.)"""
    ids = torch.randint(0, VOCAB, (B, T))
    outs = []
    for kind in ("batchnorm", "batchnorm_masked"):
        torch.manual_seed(5)
        gpt = GPT.from_preset("gpt-nano", vocab_size=VOCAB, norm=kind, dropout=0.0).train()
        trained = gpt(ids)
        stats = [m.running_var.clone() for m in gpt.modules() if isinstance(m, nn.BatchNorm1d)]
        outs.append((trained, stats, gpt.eval()(ids)))
    (a, sa, ea), (b, sb, eb) = outs
    torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    assert sa and all(torch.allclose(x, y, atol=1e-6) for x, y in zip(sa, sb))
    torch.testing.assert_close(ea, eb, rtol=0, atol=1e-5)


def test_padding_reaches_no_real_token_with_masked_batchnorm_in_gpt_and_the_decoder():
    """GPT with left padding (its attention_mask) and the Transformer's decoder (target padding = pad ids)."""
    torch.manual_seed(2)
    keep = padding_mask().flip(1)  # left padding for GPT
    ids = torch.randint(3, VOCAB, (B, T))
    gpt = GPT.from_preset("gpt-nano", vocab_size=VOCAB, norm="batchnorm_masked", ff_inner_norm="batchnorm_masked")
    gpt.train()
    a = gpt(ids, attention_mask=keep.long())
    b = gpt(_change_padding(ids, keep), attention_mask=keep.long())
    torch.testing.assert_close(a[keep], b[keep], rtol=0, atol=1e-6)

    torch.manual_seed(3)
    model = Transformer.from_preset(
        "transformer-tiny", src_vocab_size=VOCAB, dropout=0.0, norm="batchnorm_masked", norm_first=True
    ).train()
    src = torch.randint(3, VOCAB, (B, 5))
    tgt, keep = torch.randint(3, VOCAB, (B, T)), padding_mask()
    padded = tgt.masked_fill(~keep, 0)
    # What sits at a padded target position must not matter: compare the pad id with a real-looking token
    # marked as padding by tgt_mask.
    a = model(src, padded)
    b = model(src, _change_padding(tgt, keep), tgt_mask=keep)
    torch.testing.assert_close(a[keep], b[keep], rtol=0, atol=1e-6)


# --------------------------------------------------------------------------------------------------------------
# Residual paths


def zero_sublayers(block: Block) -> Block:
    """Attention and FFN outputs zero: what is left of the block is its skip paths and norms."""
    with torch.no_grad():
        for attn in filter(None, (block.self_attn, block.cross_attn)):
            attn.out.weight.zero_()
            attn.out.bias.zero_()
        block.ff.fc2.weight.zero_()
        block.ff.fc2.bias.zero_()
    return block


def block(norm_first, ra=True, rf=True, cross=False, norm="layernorm", seed=0) -> Block:
    torch.manual_seed(seed)
    b = Block(D, H, 4 * D, norm_first=norm_first, residual_attn=ra, residual_ff=rf, cross_attention=cross, norm=norm)
    with torch.no_grad():  # norms that are not the identity, so that a norm left out or added shows
        for m in b.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.normal_(1.0, 0.5)
                m.bias.normal_(0.0, 0.5)
    return b.eval()


@torch.no_grad()
@pytest.mark.parametrize("cross", [False, True])
def test_with_sublayers_zeroed_only_the_skip_paths_are_left(cross):
    x, ctx = torch.randn(B, T, D), torch.randn(B, 5, D)
    kw = dict(context=ctx) if cross else {}
    for ra, rf in ((True, True), (False, True), (True, False), (False, False)):
        pre = zero_sublayers(block(True, ra, rf, cross))
        expected = x if (ra and rf) else torch.zeros_like(x)
        torch.testing.assert_close(pre(x, **kw), expected)
        post = zero_sublayers(block(False, ra, rf, cross))
        # Post-LN: each sub-layer ends in its norm; a missing skip path makes that norm's input zero.
        h = post.norm1(x if ra else torch.zeros_like(x))
        if cross:
            h = post.norm_cross(h if ra else torch.zeros_like(h))
        expected = post.norm2(h if rf else torch.zeros_like(h))
        torch.testing.assert_close(post(x, **kw), expected)


@torch.no_grad()
@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("ra,rf", [(True, True), (False, True), (True, False), (False, False)])
def test_residual_switches_match_the_written_out_block(norm_first, ra, rf):
    b = block(norm_first, ra, rf, cross=True, seed=1)
    x, ctx = torch.randn(B, T, D), torch.randn(B, 5, D)

    def sa(h):
        return b.self_attn(h, is_causal=True)

    def ca(h):
        return b.cross_attn(h, ctx)

    if norm_first:
        h = (x if ra else 0) + sa(b.norm1(x))
        h = (h if ra else 0) + ca(b.norm_cross(h))
        expected = (h if rf else 0) + b.ff(b.norm2(h))
    else:
        h = b.norm1((x if ra else 0) + sa(x))
        h = b.norm_cross((h if ra else 0) + ca(h))
        expected = b.norm2((h if rf else 0) + b.ff(h))
    torch.testing.assert_close(b(x, is_causal=True, context=ctx), expected)


@torch.no_grad()
def test_norm_none_post_ln_block_is_x_plus_sublayer():
    b = block(False, norm="none", seed=2)
    x = torch.randn(B, T, D)
    h = x + b.self_attn(x)
    torch.testing.assert_close(b(x), h + b.ff(h))


@pytest.mark.parametrize("model", ["gpt", "bert", "transformer", "vit"])
def test_models_hand_the_switches_to_every_block(model):
    switches = dict(residual_attn=False, residual_ff=False, norm="none", ff_inner_norm="layernorm")
    net = build(model, **switches)
    blocks = [m for m in net.modules() if isinstance(m, Block)]
    assert blocks and all(not b.residual_attn and not b.residual_ff for b in blocks)
    assert all(isinstance(b.ff.inner_norm, nn.LayerNorm) for b in blocks)
    assert net.nondefault_switches() == switches
    # norm="none": no norm anywhere but the FFN's inner LayerNorms asked for here.
    norms = [n for n, m in net.named_modules() if isinstance(m, (nn.LayerNorm, nn.modules.batchnorm._BatchNorm))]
    assert all(n.endswith("ff.inner_norm") for n in norms), norms


@pytest.mark.parametrize("model", ["gpt", "bert", "transformer", "vit"])
def test_norm_none_has_no_norm_parameters(model):
    net = build(model, norm="none")
    names = [n for n, _ in net.named_parameters()]
    assert not [n for n in names if "norm" in n], names
    reference = {n for n, _ in build(model).named_parameters()}
    assert set(names) == {n for n in reference if "norm" not in n}
    if model == "bert":  # the MLM head's LayerNorm belongs to the head's transform, not to the residual stream
        pretraining = BERT.from_preset("bert-tiny", vocab_size=VOCAB, norm="none")
        assert [n for n, _ in pretraining.named_parameters() if "norm" in n] == ["mlm.norm.weight", "mlm.norm.bias"]


# --------------------------------------------------------------------------------------------------------------
# Defaults


def build(model: str, seed: int = 0, **switches):
    torch.manual_seed(seed)
    if model == "gpt":
        return GPT.from_preset("gpt-nano", vocab_size=VOCAB, **switches).eval()
    if model == "bert":
        return BERT.from_preset("bert-tiny", vocab_size=VOCAB, head="classification", **switches).eval()
    if model == "transformer":
        return Transformer.from_preset("transformer-tiny", src_vocab_size=VOCAB, **switches).eval()
    return ViT.from_preset("vit-nano/4", **switches).eval()


def run(model: str, net):
    ids = torch.randint(3, VOCAB, (B, T), generator=torch.Generator().manual_seed(5))
    if model == "gpt":
        return net(ids)
    if model == "bert":
        out = net(ids, attention_mask=padding_mask().long())
        return torch.cat([out.hidden.flatten(), out.logits.flatten()])
    if model == "transformer":
        return net(ids, ids[:, :5], src_mask=padding_mask())
    return net(torch.randn(B, 3, 32, 32, generator=torch.Generator().manual_seed(5)))


@torch.no_grad()
@pytest.mark.parametrize("model", ["gpt", "bert", "transformer", "vit"])
def test_explicit_defaults_are_bit_identical(model):
    causal = {"gpt": {}, "transformer": dict(encoder_causal=False)}.get(model, dict(causal=False))
    spelled = dict(norm="layernorm", ff_inner_norm=None, residual_attn=True, residual_ff=True) | causal
    plain, explicit = build(model), build(model, **spelled)
    assert plain.config == explicit.config and explicit.nondefault_switches() == {}
    assert list(plain.state_dict()) == list(explicit.state_dict())
    assert torch.equal(run(model, plain), run(model, explicit))
    # "none" is the spelled-out name of no FFN inner norm (a sweep cannot switch to null: null keeps the preset's).
    assert build(model, ff_inner_norm="none").config == plain.config


def test_make_norm_rejects_unknown_kinds_and_none_is_identity():
    assert isinstance(make_norm("none", D), nn.Identity)
    with pytest.raises(ValueError, match="unknown norm 'group'"):
        make_norm("group", D)


@torch.no_grad()
def test_bn_vit_class_token_shortcut_is_exact_in_eval_mode():
    """In eval mode BatchNorm is a per-position map: computing only the class token's row in the last block
    gives the full pass's logits (in training the batch statistics would differ, and the full pass runs)."""
    torch.manual_seed(6)
    model = ViT.from_preset("vit-nano/4", norm="batchnorm", ff_inner_norm="batchnorm").train()
    images = torch.randn(8, 3, 32, 32)
    model(images)  # running statistics that are not the initial ones
    model.eval()
    torch.testing.assert_close(model(images), model.forward_head(model.forward_features(images)))


def test_a_bn_vit_config_recorded_before_ff_inner_norm_keeps_its_ffn_batchnorm():
    """Checkpoints of BN-ViT from before the switch record norm='batchnorm' only; their FFN had a BatchNorm."""
    trained = ViT.from_preset("vit-nano/4", norm="batchnorm", ff_inner_norm="batchnorm")
    old = {k: v for k, v in trained.config_dict().items() if k != "ff_inner_norm"}
    rebuilt = ViT.from_config_dict(old)
    assert rebuilt.config.ff_inner_norm == "batchnorm"
    rebuilt.load_state_dict(trained.state_dict())  # strict: every key fits
    assert ViT.from_config_dict(old | {"ff_inner_norm": None}).config.ff_inner_norm is None


@pytest.mark.parametrize("kind", ["batchnorm", "batchnorm_masked"])
def test_sync_batchnorm_conversion_keeps_both_variants(kind):
    """A trainer's sync_batchnorm (DDP) swaps every BatchNorm for torch's SyncBatchNorm, which normalizes dim 1
    and knows no mask. The converted model computes the same, in training (without a process group
    SyncBatchNorm uses this process's batch) and in eval mode, and masked stays masked."""
    keep = padding_mask()
    ids = torch.randint(3, VOCAB, (B, T))
    switches = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, norm=kind, ff_inner_norm=kind)
    model = BERT.from_preset("bert-tiny", vocab_size=VOCAB, **switches)
    synced = nn.SyncBatchNorm.convert_sync_batchnorm(BERT.from_preset("bert-tiny", vocab_size=VOCAB, **switches))
    synced.load_state_dict(model.state_dict())
    assert any(isinstance(m, nn.SyncBatchNorm) for m in synced.modules())
    for mode in (True, False):
        model.train(mode), synced.train(mode)
        a = model(ids, attention_mask=keep.long()).hidden
        b = synced(ids, attention_mask=keep.long()).hidden
        torch.testing.assert_close(a[keep], b[keep])
    ours = [m.running_mean for m in model.modules() if isinstance(m, nn.BatchNorm1d)]
    theirs = [m.running_mean for m in synced.modules() if isinstance(m, nn.SyncBatchNorm)]
    assert len(ours) == len(theirs) and all(torch.allclose(x, y, atol=1e-6) for x, y in zip(ours, theirs))

    vit = ViT.from_preset("vit-nano/4", norm="batchnorm", ff_inner_norm="batchnorm").eval()
    images = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(nn.SyncBatchNorm.convert_sync_batchnorm(copy.deepcopy(vit))(images), vit(images))


def test_models_with_block_switches_are_not_exported_as_the_reference_architecture():
    from zoo.interop.exportable import check_native

    check_native(build("gpt"))  # the reference: a native Hugging Face class computes it
    for model, switch in (("gpt", dict(residual_ff=False)), ("bert", dict(causal=True)), ("vit", dict(norm="none"))):
        with pytest.raises(ValueError, match=f"{next(iter(switch))}=") as err:
            check_native(build(model, **switch))
        assert "\n" not in str(err.value)
