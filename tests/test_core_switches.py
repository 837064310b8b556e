"""The lab's switches in zoo.core (issue 11): attn_scale, attn_score, qk_proj, positions, attn_window.

Each switch is checked against a reference written out here (not against the code it tests): defaults leave every
model identical and on the SDPA fast path; RoPE, ALiBi, additive attention, scales and projections match explicit
formulas; windows equal full attention when they hide nothing, hide exactly the keys beyond them and never build
an (n, n) score matrix; cached decoding equals the full forward; non-learned positions run past the training
length; bad values of every switch (one table) fail in one line naming the option; every model config lists each
switch once, null, from the shared YAML list, and configs recorded before the switches were grouped still rebuild.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from torch.utils._python_dispatch import TorchDispatchMode

from zoo.core import (
    ComputeOptions,
    KVCache,
    MultiHeadAttention,
    RotaryEmbedding,
    SinusoidalPositionEmbedding,
    alibi_slopes,
    switch_names,
)
from zoo.core.window import windowed_attention
from zoo.models import BERT, GPT, Transformer, ViT

D, H, B, T = 48, 4, 2, 9
DK = D // H
TOL = dict(atol=1e-6, rtol=1e-5)
VOCAB = 40


# --------------------------------------------------------------------------------------------------------------
# References written out from the papers' formulas


def rope_reference(x: torch.Tensor, base: float, start: int = 0) -> torch.Tensor:
    """x: (B, T, dk). Pair (2i, 2i+1) at position p rotated by p * base^(-2i/dk) (RoFormer)."""
    out = torch.empty_like(x)
    dk = x.shape[-1]
    for p in range(x.shape[1]):
        for i in range(dk // 2):
            theta = (start + p) * base ** (-2 * i / dk)
            a, b = x[:, p, 2 * i], x[:, p, 2 * i + 1]
            out[:, p, 2 * i] = a * math.cos(theta) - b * math.sin(theta)
            out[:, p, 2 * i + 1] = a * math.sin(theta) + b * math.cos(theta)
    return out


def press_slopes(n: int) -> list[float]:
    """ALiBi slopes as Press et al. state them: 2^(-8k/n) for n a power of two, else the closest power of two's
    slopes followed by every other slope of twice that power."""

    def pow2(m):
        return [2 ** (-8 * k / m) for k in range(1, m + 1)]

    closest = 2 ** int(math.log2(n))
    return pow2(closest) + pow2(2 * closest)[::2][: n - closest]


DEFAULT_SCALE = 1 / math.sqrt(DK)


def reference_self_attention(
    attn: MultiHeadAttention,
    x,
    *,
    causal=False,
    key_keep=None,
    window=None,
    rope_base=None,
    slopes=None,
    scale=DEFAULT_SCALE,
):
    """Per head: logits = scale * score(q_i, k_j) - slope * |i - j|, masked, softmax, times V; then W_O."""
    b, t, d = x.shape
    if attn.qk_proj == "separate":
        w, bias = attn.qkv.weight, attn.qkv.bias
        q, k, v = (x @ w[i * d : (i + 1) * d].T + bias[i * d : (i + 1) * d] for i in range(3))
    elif attn.qk_proj == "shared":
        w, bias = attn.qv.weight, attn.qv.bias
        q = k = x @ w[:d].T + bias[:d]
        v = x @ w[d:].T + bias[d:]
    else:
        q = k = v = x
    i = torch.arange(t)[:, None]
    j = torch.arange(t)[None, :]
    allowed = torch.ones(t, t, dtype=torch.bool)
    if causal:
        allowed &= j <= i
    if window is not None:
        allowed &= (i - j < window) if causal else ((i - j).abs() <= window // 2)
    allowed = allowed.expand(b, t, t)
    if key_keep is not None:  # a padding query may see itself where causality/the window could leave it nothing
        allowed = allowed & key_keep.bool()[:, None, :]
        if causal or window is not None:
            allowed = allowed | torch.eye(t, dtype=torch.bool)
    out = torch.empty(b, t, d)
    for h in range(attn.n_heads):
        sl = slice(h * DK, (h + 1) * DK)
        qh, kh, vh = q[..., sl], k[..., sl], v[..., sl]
        if rope_base is not None:
            qh, kh = rope_reference(qh, rope_base), rope_reference(kh, rope_base)
        if attn.score_v is not None:
            scores = torch.tanh(qh[:, :, None, :] + kh[:, None, :, :]) @ attn.score_v[h]
        else:
            scores = qh @ kh.transpose(1, 2)
        scores = scores * scale
        if slopes is not None:
            scores = scores - slopes[h] * (i - j).abs()
        out[..., sl] = scores.masked_fill(~allowed, float("-inf")).softmax(-1) @ vh
    return out @ attn.out.weight.T + attn.out.bias


def gpt(seed=0, **overrides) -> GPT:
    torch.manual_seed(seed)
    config = dict(vocab_size=VOCAB, block_size=16, n_layer=2, n_head=H, n_embd=D) | overrides
    return GPT.from_preset("gpt-nano", **config).eval()


class OpLog(TorchDispatchMode):
    """Records every aten op with its named arguments, and the largest tensor any op returns."""

    def __init__(self):
        super().__init__()
        self.calls: list[tuple[str, dict]] = []
        self.shapes: list[tuple[int, ...]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        named = dict(zip([a.name for a in func._schema.arguments], args)) | kwargs
        self.calls.append((str(func), named))
        out = func(*args, **kwargs)
        for o in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(o, torch.Tensor):
                self.shapes.append(tuple(o.shape))
        return out

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]


# --------------------------------------------------------------------------------------------------------------
# Defaults: identical models, fast path kept

EXPLICIT_DEFAULTS = dict(attn_scale="sqrt_dk", attn_score="dot", qk_proj="separate", attn_window=None)
POSITION_DEFAULTS = dict(position_merge="add", sinusoid_base=10000.0)


@torch.no_grad()
@pytest.mark.parametrize("name", ["gpt", "bert", "transformer", "vit"])
def test_explicit_defaults_give_identical_models(name):
    """Spelling out every switch at its default builds the same parameters and bit-identical outputs."""
    ids = torch.randint(3, VOCAB, (B, T))
    if name == "gpt":
        build, extra = (lambda **kw: GPT.from_preset("gpt-nano", vocab_size=VOCAB, **kw)), dict(positions="learned")
        run = lambda m: m(ids)  # noqa: E731
    elif name == "bert":
        build, extra = (lambda **kw: BERT.from_preset("bert-tiny", vocab_size=VOCAB, **kw)), dict(positions="learned")
        run = lambda m: m(ids, attention_mask=torch.ones_like(ids)).mlm_logits  # noqa: E731
    elif name == "transformer":
        build = lambda **kw: Transformer.from_preset("transformer-tiny", src_vocab_size=VOCAB, **kw)  # noqa: E731
        extra = dict(positions="sinusoidal")
        run = lambda m: m(ids, ids[:, :5])  # noqa: E731
    else:
        build, extra = (lambda **kw: ViT.from_preset("vit-nano/4", **kw)), {}
        images = torch.randn(B, 3, 32, 32)
        run = lambda m: m(images)  # noqa: E731
    if extra:
        extra |= POSITION_DEFAULTS
    torch.manual_seed(0)
    plain = build().eval()
    torch.manual_seed(0)
    spelled = build(**EXPLICIT_DEFAULTS, **extra).eval()
    assert plain.config == spelled.config
    assert plain.nondefault_switches() == {} == spelled.nondefault_switches()
    assert list(plain.state_dict()) == list(spelled.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(plain.state_dict().values(), spelled.state_dict().values()))
    assert torch.equal(run(plain), run(spelled))


@torch.no_grad()
def test_defaults_stay_on_the_fused_sdpa_path_with_is_causal():
    """GPT at its defaults: fused QKV (one matmul), SDPA's fused kernel with is_causal, no explicit softmax.
    A scale, ALiBi and RoPE also stay on SDPA; additive scores take the explicit path."""
    model = gpt()
    attn = model.blocks.layers[0].self_attn
    assert attn.qkv.weight.shape == (3 * D, D)
    with OpLog() as log:
        model(torch.randint(0, VOCAB, (B, T)))
    fused = [args for name, args in log.calls if "scaled_dot_product" in name]
    assert len(fused) == 2 and all(a.get("is_causal") and a.get("attn_mask") is None for a in fused)
    assert not any("softmax" in name for name in log.names())
    for switch in (dict(attn_scale=0.5), dict(attn_scale="none"), dict(positions="alibi"), dict(positions="rope")):
        with OpLog() as log:
            gpt(**switch)(torch.randint(0, VOCAB, (B, T)))
        assert any("scaled_dot_product" in n for n in log.names()), switch
    with OpLog() as log:
        gpt(attn_score="additive")(torch.randint(0, VOCAB, (B, T)))
    assert not any("scaled_dot_product" in n for n in log.names())


# --------------------------------------------------------------------------------------------------------------
# attn_scale, attn_score, qk_proj against explicit formulas


@torch.no_grad()
@pytest.mark.parametrize("impl", ["sdpa", "explicit"])
@pytest.mark.parametrize("scale", ["none", 0.37, "sqrt_dk"])
def test_attn_scale_multiplies_the_logits(impl, scale):
    """'none' uses q.k as the logits, a number c uses c * q.k, on both paths; the recorded logits say so."""
    torch.manual_seed(1)
    attn = MultiHeadAttention(D, H, impl=impl, attn_scale=scale).eval()
    x = torch.randn(B, T, D)
    factor = {"none": 1.0, "sqrt_dk": 1 / math.sqrt(DK)}.get(scale, scale)
    expected = reference_self_attention(attn, x, causal=True, scale=factor)
    torch.testing.assert_close(attn(x, is_causal=True), expected, **TOL)
    attn.record_weights = True
    attn(x)
    q, k, _ = attn.qkv(x).split(D, dim=2)
    raw = q.view(B, T, H, DK).transpose(1, 2) @ k.view(B, T, H, DK).permute(0, 2, 3, 1)
    torch.testing.assert_close(attn.last_logits, raw * factor, **TOL)


@torch.no_grad()
@pytest.mark.parametrize("scale", ["none", "sqrt_dk"])
def test_additive_attention_matches_bahdanau_formula_with_padding(scale):
    """softmax_j(v_h^T tanh(q_i + k_j)) V per head, with a causal padding mask; the recorded weights are that
    softmax."""
    torch.manual_seed(2)
    attn = MultiHeadAttention(D, H, attn_score="additive", attn_scale=scale).eval()
    assert attn.score_v.shape == (H, DK)
    x = torch.randn(B, T, D)
    keep = torch.ones(B, T, dtype=torch.long)
    keep[1, :3] = 0  # left padding
    from zoo.core import build_attention_mask

    factor = 1.0 if scale == "none" else 1 / math.sqrt(DK)
    out = attn(x, mask=build_attention_mask(keep, T, T, causal=True))
    expected = reference_self_attention(attn, x, causal=True, key_keep=keep, scale=factor)
    torch.testing.assert_close(out, expected, **TOL)


def test_additive_attention_dropout_drops_the_weights():
    """In training, attention dropout applies to the additive weights exactly as F.dropout on them would."""
    torch.manual_seed(3)
    attn = MultiHeadAttention(D, H, attn_score="additive", dropout=0.5)
    x = torch.randn(B, T, D)
    torch.manual_seed(7)
    out = attn(x, is_causal=True)
    attn.eval()
    attn.record_weights = True
    attn(x, is_causal=True)
    torch.manual_seed(7)
    dropped = F.dropout(attn.last_weights, p=0.5)
    v = attn.qkv(x)[..., 2 * D :].view(B, T, H, DK).transpose(1, 2)
    expected = attn.out((dropped @ v).transpose(1, 2).reshape(B, T, D))
    torch.testing.assert_close(out, expected, **TOL)
    assert not torch.allclose(out, attn(x, is_causal=True))


@torch.no_grad()
@pytest.mark.parametrize("impl", ["sdpa", "explicit"])
def test_qk_proj_none_and_shared(impl):
    """none: no Q/K/V parameters (only W_O), q = k = v = x; shared: one (d, d) matrix serves Q and K."""
    torch.manual_seed(4)
    x = torch.randn(B, T, D)
    none = MultiHeadAttention(D, H, qk_proj="none", impl=impl).eval()
    assert {n for n, _ in none.named_parameters()} == {"out.weight", "out.bias"}
    torch.testing.assert_close(none(x, is_causal=True), reference_self_attention(none, x, causal=True), **TOL)
    shared = MultiHeadAttention(D, H, qk_proj="shared", impl=impl).eval()
    assert {n: tuple(p.shape) for n, p in shared.named_parameters()} == {
        "qv.weight": (2 * D, D),
        "qv.bias": (2 * D,),
        "out.weight": (D, D),
        "out.bias": (D,),
    }
    torch.testing.assert_close(shared(x), reference_self_attention(shared, x), **TOL)
    # GPT: qk_proj=none removes exactly the 3d^2 + 3d Q/K/V weights of every layer.
    assert gpt().num_parameters() - gpt(qk_proj="none").num_parameters() == 2 * (3 * D * D + 3 * D)


@torch.no_grad()
@pytest.mark.parametrize("qk_proj", ["shared", "none"])
def test_cross_attention_with_switched_projections_and_cache(qk_proj):
    """Cross-attention under shared/none projections: keys from the context through the same matrix as the
    queries (or none), cached once and reused."""
    torch.manual_seed(5)
    attn = MultiHeadAttention(D, H, cross=True, qk_proj=qk_proj).eval()
    x, ctx = torch.randn(B, 3, D), torch.randn(B, 6, D)
    d = D
    if qk_proj == "shared":
        w, b = attn.qv.weight, attn.qv.bias
        q, k, v = x @ w[:d].T + b[:d], ctx @ w[:d].T + b[:d], ctx @ w[d:].T + b[d:]
    else:
        q, k, v = x, ctx, ctx
    heads = lambda t: t.view(B, -1, H, DK).transpose(1, 2)  # noqa: E731
    y = torch.softmax(heads(q) @ heads(k).transpose(-2, -1) / math.sqrt(DK), -1) @ heads(v)
    expected = attn.out(y.transpose(1, 2).reshape(B, 3, D))
    torch.testing.assert_close(attn(x, ctx), expected, **TOL)
    from zoo.core import LayerCache

    cache = LayerCache()
    attn(x[:, :1], ctx, cache=cache)
    torch.testing.assert_close(attn(x[:, 1:], None, cache=cache), expected[:, 1:], **TOL)


# --------------------------------------------------------------------------------------------------------------
# Positions: RoPE, ALiBi, sinusoids, concat


def test_rope_rotates_pairs_as_the_reference_and_depends_on_distance_only():
    torch.manual_seed(6)
    x = torch.randn(1, 2, 11, DK)
    rope = RotaryEmbedding(DK, base=500.0)
    for h in range(2):
        torch.testing.assert_close(rope(x, 3)[0, h], rope_reference(x[:, h], 500.0, start=3)[0], **TOL)
    q, k = torch.randn(1, 1, 1, DK), torch.randn(1, 1, 1, DK)
    dots = [(rope(q, i + shift) * rope(k, shift)).sum() for shift in (0, 5, 40) for i in (2,)]
    torch.testing.assert_close(torch.stack(dots), dots[0].expand(3), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("n", [1, 2, 4, 8, 16, 3, 6, 12])
def test_alibi_slopes_of_press_et_al(n):
    torch.testing.assert_close(alibi_slopes(n), torch.tensor(press_slopes(n)), atol=0, rtol=0)
    if n == 8:
        assert alibi_slopes(8).tolist() == [2.0**-k for k in range(1, 9)]
    if n == 6:
        assert alibi_slopes(6).tolist() == [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3]


@torch.no_grad()
@pytest.mark.parametrize("impl", ["sdpa", "explicit"])
@pytest.mark.parametrize("causal", [True, False])
def test_rope_and_alibi_attention_match_reference(impl, causal):
    torch.manual_seed(7)
    x = torch.randn(B, T, D)
    keep = torch.ones(B, T, dtype=torch.long)
    keep[1, -2:] = 0
    from zoo.core import build_attention_mask

    mask = build_attention_mask(keep, T, T, causal=causal)
    rope = MultiHeadAttention(D, H, positions="rope", rope_base=100.0, impl=impl).eval()
    torch.testing.assert_close(
        rope(x, mask=mask), reference_self_attention(rope, x, causal=causal, key_keep=keep, rope_base=100.0), **TOL
    )
    alibi = MultiHeadAttention(D, H, positions="alibi", impl=impl).eval()
    torch.testing.assert_close(
        alibi(x, mask=mask),
        reference_self_attention(alibi, x, causal=causal, key_keep=keep, slopes=press_slopes(H)),
        **TOL,
    )
    torch.testing.assert_close(
        alibi(x, is_causal=True), reference_self_attention(alibi, x, causal=True, slopes=press_slopes(H)), **TOL
    )


def test_sinusoid_base_and_unbounded_table():
    """PE[p, 2i] = sin(p / base^(2i/d)); an unbounded table extended on demand equals a longer one built at once."""
    pe = SinusoidalPositionEmbedding(8, 16, base=100.0, bounded=False)
    rows = pe(torch.arange(40))
    for p in (0, 3, 39):
        for i in (0, 5):
            assert abs(rows[p, 2 * i].item() - math.sin(p / 100.0 ** (2 * i / 16))) < 1e-5
            assert abs(rows[p, 2 * i + 1].item() - math.cos(p / 100.0 ** (2 * i / 16))) < 1e-5
    assert torch.equal(rows, SinusoidalPositionEmbedding(40, 16, base=100.0)(torch.arange(40)))


@torch.no_grad()
@pytest.mark.parametrize("positions", ["learned", "sinusoidal"])
def test_concat_positions_widen_then_project(positions):
    """position_merge=concat: [token (d) ; position (d)] is 2d wide and W (d x 2d, no bias) maps it back to d."""
    model = gpt(positions=positions, position_merge="concat")
    assert model.pos_merge.proj.weight.shape == (D, 2 * D) and model.pos_merge.proj.bias is None
    assert model.num_parameters() - gpt(positions=positions).num_parameters() == 2 * D * D
    ids = torch.randint(0, VOCAB, (B, T))
    seen = {}
    model.blocks.register_forward_pre_hook(lambda m, args: seen.setdefault("x", args[0]))
    model(ids)
    joined = torch.cat([model.tok_emb(ids), model.pos_emb(torch.arange(T))[None].expand(B, T, D)], dim=-1)
    torch.testing.assert_close(seen["x"], joined @ model.pos_merge.proj.weight.T, **TOL)
    bert = BERT.from_preset("bert-tiny", vocab_size=VOCAB, position_merge="concat")
    assert bert.pos_merge.proj.weight.shape == (128, 256)


# --------------------------------------------------------------------------------------------------------------
# attn_window


def _dense_reference(q, k, v, window, causal, q_start, key_keep=None):
    t, s = q.shape[2], k.shape[2]
    i = torch.arange(q_start, q_start + t)[:, None]
    j = torch.arange(s)[None, :]
    allowed = ((i - j < window) & (j <= i)) if causal else ((i - j).abs() <= window // 2)
    if key_keep is not None:
        allowed = (allowed & key_keep.bool()[:, None, None, :]) | (i == j)
    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~allowed, float("-inf"))
    return scores.softmax(-1) @ v


def _dot(q, k, q_start, k_start):
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("window", [1, 3, 6, 40])
def test_blocked_window_matches_dense_band_reference(causal, window):
    """The blocked computation (small blocks, so several of them) equals a dense band mask, with padding and
    with queries that continue a cached prefix; a window covering everything is full attention."""
    torch.manual_seed(8)
    q, k, v = torch.randn(B, H, 20, DK), torch.randn(B, H, 20, DK), torch.randn(B, H, 20, DK)
    keep = torch.ones(B, 20, dtype=torch.bool)
    keep[0, -5:] = False
    for key_keep, mask in ((None, None), (keep, keep[:, None, None, :])):
        out, _, _ = windowed_attention(q, k, v, _dot, window=window, causal=causal, q_start=0, mask=mask, block_size=4)
        torch.testing.assert_close(out, _dense_reference(q, k, v, window, causal, 0, key_keep), **TOL)
    if causal:  # the last 3 queries after a prefix of 17 keys
        out, _, _ = windowed_attention(q[:, :, 17:], k, v, _dot, window=window, causal=True, q_start=17, block_size=2)
        torch.testing.assert_close(out, _dense_reference(q, k, v, window, True, 0)[:, :, 17:], **TOL)
    if window == 40:
        full = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        torch.testing.assert_close(
            windowed_attention(q, k, v, _dot, window=window, causal=causal, q_start=0, block_size=4)[0], full, **TOL
        )


def test_window_hides_keys_beyond_it_exactly():
    """The output at position i has exactly zero gradient with respect to inputs older than the window."""
    torch.manual_seed(9)
    attn = MultiHeadAttention(D, H, attn_window=3)
    x = torch.randn(1, 12, D, requires_grad=True)
    attn(x, is_causal=True)[0, 10].sum().backward()
    per_position = x.grad[0].abs().sum(-1)
    assert (per_position[:8] == 0).all() and (per_position[8:11] > 0).all() and (per_position[11:] == 0).all()
    x.grad = None
    bidir = MultiHeadAttention(D, H, attn_window=4)  # keys within 2 on each side
    bidir(x)[0, 5].sum().backward()
    per_position = x.grad[0].abs().sum(-1)
    assert (per_position[:3] == 0).all() and (per_position[3:8] > 0).all() and (per_position[8:] == 0).all()


def test_window_scores_cost_n_times_w_not_n_squared():
    """No op of a windowed forward + backward makes a tensor with n x n entries per head (n = 512, w = 16)."""
    torch.manual_seed(10)
    n, w = 512, 16
    attn = MultiHeadAttention(D, H, attn_window=w)
    x = torch.randn(1, n, D, requires_grad=True)
    with OpLog() as log:
        attn(x, is_causal=True).sum().backward()
    largest = max(math.prod(s) for s in log.shapes)
    assert largest < n * n  # the biggest are the (n, 3d) projections and (H, 64, 64 + w) score blocks
    with OpLog() as log:
        MultiHeadAttention(D, H, impl="explicit")(x, is_causal=True)
    assert max(math.prod(s) for s in log.shapes) >= H * n * n  # the check above would see an n x n tensor


@torch.no_grad()
def test_window_at_least_the_length_equals_full_attention_in_models():
    """attn_window >= T (causal; >= 2T bidirectional) gives the full model's outputs, padded or not, cached or not."""
    full, windowed = gpt(seed=11), gpt(seed=12, attn_window=16)
    windowed.load_state_dict(full.state_dict())
    ids = torch.randint(0, VOCAB, (B, 12))
    keep = torch.ones(B, 12, dtype=torch.long)
    keep[0, :4] = 0
    torch.testing.assert_close(windowed(ids), full(ids), **TOL)
    torch.testing.assert_close(windowed(ids, attention_mask=keep), full(ids, attention_mask=keep), **TOL)
    cache = KVCache(2)
    steps = [windowed(ids[:, :5], attention_mask=keep[:, :5], cache=cache)]
    steps += [windowed(ids[:, i : i + 1], attention_mask=keep[:, : i + 1], cache=cache) for i in range(5, 12)]
    torch.testing.assert_close(torch.cat(steps, 1), full(ids, attention_mask=keep), **TOL)
    torch.manual_seed(13)
    bert_full = BERT.from_preset("bert-tiny", vocab_size=VOCAB).eval()
    bert_win = BERT.from_preset("bert-tiny", vocab_size=VOCAB, attn_window=24).eval()
    bert_win.load_state_dict(bert_full.state_dict())
    pad = torch.ones(B, 12, dtype=torch.long)
    pad[1, -3:] = 0
    torch.testing.assert_close(
        bert_win(ids, attention_mask=pad).hidden, bert_full(ids, attention_mask=pad).hidden, **TOL
    )


@torch.no_grad()
def test_windowed_gpt_with_padding_matches_the_unpadded_rows():
    """A window smaller than the sequence composes with left padding: padded rows equal their unpadded run."""
    model = gpt(seed=14, attn_window=4)
    ids = torch.randint(0, VOCAB, (1, 10))
    padded = torch.cat([torch.zeros(1, 3, dtype=torch.long), ids], dim=1)
    keep = torch.tensor([[0] * 3 + [1] * 10])
    torch.testing.assert_close(model(padded, attention_mask=keep)[:, 3:], model(ids), atol=1e-5, rtol=1e-5)


# --------------------------------------------------------------------------------------------------------------
# KV cache, padding and length extrapolation


@torch.no_grad()
@pytest.mark.parametrize(
    "switch",
    [
        dict(positions="rope"),
        dict(positions="alibi"),
        dict(attn_score="additive"),
        dict(attn_window=3),
        dict(positions="alibi", attn_window=5),
        dict(qk_proj="shared", positions="rope"),
    ],
)
def test_cached_decoding_equals_full_forward(switch):
    """Prefix then one token at a time (past the window where there is one) equals one full forward."""
    model = gpt(seed=15, **switch)
    ids = torch.randint(0, VOCAB, (B, 14))
    cache = KVCache(2)
    steps = [model(ids[:, :4], cache=cache)] + [model(ids[:, i : i + 1], cache=cache) for i in range(4, 14)]
    torch.testing.assert_close(torch.cat(steps, 1), model(ids), atol=1e-5, rtol=1e-5)


@torch.no_grad()
@pytest.mark.parametrize("positions", ["rope", "alibi"])
def test_relative_positions_are_unchanged_by_left_padding_and_generate_with_it(positions):
    model = gpt(seed=16, positions=positions)
    a, b = torch.randint(0, VOCAB, (1, 7)), torch.randint(0, VOCAB, (1, 4))
    batch = torch.cat([a, torch.cat([torch.zeros(1, 3, dtype=torch.long), b], 1)])
    keep = torch.tensor([[1] * 7, [0] * 3 + [1] * 4])
    logits = model(batch, attention_mask=keep)
    torch.testing.assert_close(logits[1, 3:], model(b)[0], atol=1e-5, rtol=1e-5)
    out = model.generate(batch, 6, attention_mask=keep, temperature=0)
    assert torch.equal(out[1, 3:], model.generate(b, 6, temperature=0)[0])


@torch.no_grad()
@pytest.mark.parametrize("positions", ["rope", "alibi", "sinusoidal", "none"])
def test_non_learned_positions_run_at_four_times_the_training_length(positions):
    """GPT (block 16) and BERT (16 positions) evaluate 64 tokens; GPT generates past block_size with the cache,
    each token the argmax over the whole prefix (no sliding window)."""
    model = gpt(seed=17, positions=positions)
    long = torch.randint(0, VOCAB, (B, 64))
    assert torch.isfinite(model(long)).all()
    out = model.generate(long[:, :10], 14, temperature=0)
    assert out.shape == (B, 24)
    for i in range(16, 24):
        assert torch.equal(out[:, i], model(out[:, :i])[:, -1].argmax(-1)), i
    bert = BERT.from_preset("bert-tiny", vocab_size=VOCAB, max_position_embeddings=16, positions=positions).eval()
    assert torch.isfinite(bert(long).mlm_logits).all()


@torch.no_grad()
@pytest.mark.parametrize("positions", ["rope", "alibi", "none"])
def test_transformer_relative_positions_translate_past_max_len(positions):
    """Without a position table the encoder-decoder has no length limit: sources and outputs past max_len."""
    torch.manual_seed(18)
    model = Transformer.from_preset("transformer-tiny", src_vocab_size=VOCAB, max_len=10, positions=positions).eval()
    src = torch.randint(3, VOCAB, (B, 40))
    memory = model.encode(src)
    tgt = torch.randint(3, VOCAB, (B, 40))
    full = model.decode(tgt, memory)
    assert torch.isfinite(full).all()
    cache = KVCache(2)
    steps = [model.decode(tgt[:, i : i + 1], memory, cache=cache) for i in range(40)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)
    assert model.generate(src, max_new_tokens=30).shape[0] == B


def test_learned_positions_beyond_their_table_fail_in_one_line():
    for model, run in (
        (gpt(), lambda m: m(torch.zeros(1, 17, dtype=torch.long))),
        (
            BERT.from_preset("bert-tiny", vocab_size=VOCAB, max_position_embeddings=16),
            lambda m: m(torch.zeros(1, 17, dtype=torch.long)),
        ),
        (
            Transformer.from_preset("transformer-tiny", src_vocab_size=VOCAB, max_len=16, positions="learned"),
            lambda m: m.encode(torch.ones(1, 17, dtype=torch.long)),
        ),
    ):
        with pytest.raises(ValueError, match="maximum context of 16") as err:
            run(model)
        assert "\n" not in str(err.value)


# --------------------------------------------------------------------------------------------------------------
# Probes, validation, interop guard


@torch.no_grad()
@pytest.mark.parametrize("switch", [{}, dict(attn_score="additive"), dict(attn_window=3), dict(positions="alibi")])
def test_record_weights_keeps_logits_and_their_softmax(switch):
    torch.manual_seed(19)
    attn = MultiHeadAttention(D, H, **switch).eval()
    attn.record_weights = True
    x = torch.randn(B, T, D)
    out = attn(x, is_causal=True)
    assert attn.last_logits.shape == attn.last_weights.shape == (B, H, T, T)
    torch.testing.assert_close(attn.last_logits.softmax(-1), attn.last_weights, **TOL)
    assert torch.isneginf(attn.last_logits.triu(1)[..., torch.ones(T, T).triu(1).bool()]).all()
    attn.record_weights = False
    torch.testing.assert_close(attn(x, is_causal=True), out, atol=1e-5, rtol=1e-5)


# Every core option of the four model configs (zoo.core.switches) with a bad value and what its one-line error says:
# the single table of bad values; a new switch adds its row here (test_every_core_option_has_a_bad_value).
BAD = [
    ("positions", "relative", "unknown positions 'relative'"),
    ("position_merge", "mul", "unknown position_merge 'mul'"),
    ("sinusoid_base", 0, "sinusoid_base must be a number > 1"),
    ("attn_scale", "sqrt", "unknown attn_scale 'sqrt'"),
    ("attn_scale", -1.0, "attn_scale"),
    ("attn_scale", True, "attn_scale"),
    ("attn_score", "multiplicative", "unknown attn_score 'multiplicative'"),
    ("qk_proj", "tied", "unknown qk_proj 'tied'"),
    ("attn_window", 0, "attn_window"),
    ("attn_window", 2.5, "attn_window"),
    ("qk_norm", "yes", "qk_norm must be true or false"),
    ("norm", "batchnorm2d", "unknown norm 'batchnorm2d'"),
    ("norm", "rmsnorm", "unknown norm"),
    ("ff_inner_norm", "dropout", "unknown ff_inner_norm"),
    ("residual_attn", "off", "residual_attn must be true or false"),
    ("residual_ff", 0, "residual_ff must be true or false"),
    ("causal", "yes", "causal must be true or false"),
    ("encoder_causal", 1, "encoder_causal must be true or false"),
    ("attn_impl", "flash", "unknown attn_impl 'flash'"),
    ("activation_checkpointing", "yes", "activation_checkpointing must be true or false"),
]
MODELS = [GPT, BERT, Transformer, ViT]


def core_options(model) -> set[str]:
    """The config fields a model inherits from zoo.core.switches: its lab switches and the compute options."""
    return switch_names(model.config_class) | {f.name for f in dataclasses.fields(ComputeOptions)}


@pytest.mark.parametrize("field,value,named", BAD)
@pytest.mark.parametrize("model", MODELS)
def test_bad_switch_values_fail_in_one_line_naming_the_option(model, field, value, named):
    if field not in {f.name for f in dataclasses.fields(model.config_class)}:
        pytest.skip(f"{model.__name__} has no {field}")
    with pytest.raises(ValueError, match=named) as err:
        model.make_config(None, **{field: value})
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("model", MODELS)
def test_every_core_option_has_a_bad_value(model):
    assert core_options(model) <= {field for field, _, _ in BAD}


# The lab switches of each model, written out (not read from the declarations they check).
POSITION_SWITCHES = {"positions", "position_merge", "sinusoid_base"}
ATTENTION_SWITCHES = {"attn_scale", "attn_score", "qk_proj", "attn_window", "qk_norm"}
BLOCK_SWITCHES = {"norm", "ff_inner_norm", "residual_attn", "residual_ff"}
SWITCHES = {
    GPT: POSITION_SWITCHES | ATTENTION_SWITCHES | BLOCK_SWITCHES,
    BERT: POSITION_SWITCHES | ATTENTION_SWITCHES | BLOCK_SWITCHES | {"causal"},
    Transformer: POSITION_SWITCHES | ATTENTION_SWITCHES | BLOCK_SWITCHES | {"encoder_causal"},
    ViT: ATTENTION_SWITCHES | BLOCK_SWITCHES | {"causal"},
}
CONF = Path(__file__).resolve().parents[1] / "zoo" / "conf"


def composed_net(*overrides: str):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="train", overrides=list(overrides)).model.net


MODEL_YAMLS = [("gpt", GPT), ("gpt2", GPT), ("bert", BERT), ("bert_classifier", BERT), ("transformer", Transformer)]


@pytest.mark.parametrize("yaml, model", [*MODEL_YAMLS, ("vit", ViT)])
def test_each_model_config_lists_its_core_options_once_null_and_overridable(yaml, model):
    """The switch lists of zoo/conf/switches reach every model config under model.net, null (the model's default),
    exactly the options its config class has, and command-line overrides set them as they always did."""
    assert switch_names(model.config_class) == SWITCHES[model]
    net = composed_net(f"model={yaml}")
    listed = {key for key in net if key in set().union(*map(core_options, MODELS))}
    assert listed == core_options(model), yaml
    assert all(net[name] is None for name in listed), yaml
    overridden = composed_net(f"model={yaml}", "model.net.qk_norm=true", "model.net.attn_impl=sdpa")
    assert overridden.qk_norm is True and overridden.attn_impl == "sdpa"


def test_bn_vit_config_sets_batchnorm_everywhere_over_the_null_list():
    bn = composed_net("model=vit_bn")  # BN-ViT: BatchNorm everywhere, also inside the FFN
    assert bn.norm == "batchnorm" and bn.ff_inner_norm == "batchnorm" and bn.qk_norm is None


# A GPT config as checkpoints recorded it before the switches were declared once (checkpoints' "zoo" section and
# config.json hold `dataclasses.asdict(config)`): it must rebuild the same model and record the same values (options
# added since, at their defaults, besides).
RECORDED_GPT = {
    "vocab_size": 40, "block_size": 64, "n_layer": 2, "n_head": 2, "n_embd": 64, "dropout": 0.0, "bias": True,
    "layer_norm_eps": 1e-05, "activation": "gelu", "attn_impl": "auto", "tie_weights": True, "positions": "rope",
    "position_merge": "add", "sinusoid_base": 10000.0, "attn_scale": "sqrt_dk", "attn_score": "dot",
    "qk_proj": "separate", "attn_window": None, "qk_norm": True, "norm": "layernorm", "ff_inner_norm": None,
    "residual_attn": True, "residual_ff": False,
}  # fmt: skip


def test_configs_recorded_before_the_switch_groups_rebuild_the_same_model():
    model = GPT.from_config_dict(dict(RECORDED_GPT))
    recorded_now = model.config_dict()
    assert {k: recorded_now[k] for k in RECORDED_GPT} == RECORDED_GPT
    defaults = GPT.make_config(None).__dict__
    assert all(recorded_now[k] == defaults[k] for k in recorded_now.keys() - RECORDED_GPT.keys())  # newer options
    assert model.nondefault_switches() == {"positions": "rope", "qk_norm": True, "residual_ff": False}
    assert GPT.from_preset("gpt-nano", vocab_size=40, positions="rope", qk_norm=True, residual_ff=False).config == (
        model.config
    )
    blocks = model.blocks.layers
    assert blocks[0].self_attn.rotary is not None and blocks[0].self_attn.q_norm is not None
    assert not blocks[0].residual_ff


def test_a_config_class_keeps_its_own_fields_positional():
    """The inherited switches are keyword-only, so a model config's constructor reads as before."""
    from zoo.models import GPTConfig, TransformerConfig

    assert GPTConfig(100, 32).block_size == 32
    config = TransformerConfig(100, None, 64, 4)
    assert (config.tgt_vocab_size, config.d_model, config.n_heads, config.positions) == (100, 64, 4, "sinusoidal")


def test_inconsistent_switches_and_core_constructors_fail():
    with pytest.raises(ValueError, match="position_merge='concat' needs positions learned or sinusoidal"):
        GPT.make_config("gpt-nano", positions="rope", position_merge="concat")
    with pytest.raises(ValueError, match="rope.*even head dimension"):
        GPT.make_config("gpt-nano", n_embd=30, n_head=10, positions="rope")
    with pytest.raises(ValueError, match="attn_score"):
        MultiHeadAttention(D, H, attn_score="bilinear")
    with pytest.raises(ValueError, match="attn_window is for self-attention"):
        MultiHeadAttention(D, H, cross=True, attn_window=4)
    with pytest.raises(ValueError, match="position_ids are for learned or sinusoidal"):
        gpt(positions="rope")(torch.zeros(1, 3, dtype=torch.long), position_ids=torch.arange(3)[None])


def test_nondefault_switches_lists_what_differs_from_the_reference():
    assert gpt().nondefault_switches() == {}
    assert gpt(positions="rope", attn_window=8).nondefault_switches() == {"positions": "rope", "attn_window": 8}
    assert Transformer.from_preset("transformer-tiny", positions="learned").nondefault_switches() == {
        "positions": "learned"
    }
    assert ViT.from_preset("vit-nano/4", qk_proj="none").nondefault_switches() == {"qk_proj": "none"}


@torch.no_grad()
def test_vit_switches_keep_the_class_token_shortcut_exact():
    """ViT with a window, shared Q/K and additive scores: computing only the class token's row in the last block
    gives the same logits as the full pass, and the attention maps stay available."""
    torch.manual_seed(20)
    model = ViT.from_preset("vit-nano/4", attn_window=6, qk_proj="shared", attn_score="additive").eval()
    images = torch.randn(B, 3, 32, 32)
    torch.testing.assert_close(model(images), model.forward_head(model.forward_features(images)), **TOL)
    maps = model.attention_maps(images)
    assert maps[0].shape == (B, 4, 65, 65) and (maps[0][:, :, 10, 14:] == 0).all()


@pytest.mark.parametrize(
    "positions, merge, scaled",
    [("sinusoidal", "add", True), ("sinusoidal", "concat", False), ("learned", "add", False), ("rope", "add", False)],
)
def test_added_sinusoids_scale_the_token_vectors_by_sqrt_d(positions, merge, scaled):
    """Unit-amplitude sinusoids added to std-0.02 token vectors drown them; the models scale the tokens by
    sqrt(d_model) then, as the 2017 paper does, and only then."""
    from zoo.models import BERT, GPT

    ids = torch.tensor([[1, 5, 7]])
    for model, d in (
        (GPT.from_preset("gpt-nano", vocab_size=11, positions=positions, position_merge=merge), 64),
        (BERT.from_preset("bert-tiny", vocab_size=11, positions=positions, position_merge=merge), 128),
    ):
        expected = model.tok_emb.weight[ids] * (math.sqrt(d) if scaled else 1.0)
        torch.testing.assert_close(model.tok_emb(ids), expected, rtol=0, atol=0)
