"""Tests of two speed-to-quality levers of the core: the squared-ReLU activation (`activation: relu2`) and QK-norm
(`qk_norm: true`), each against a reference written out here, on every attention path, and in all four models."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from zoo.core import FeedForward, KVCache, LayerCache, MultiHeadAttention, fold_batchnorms
from zoo.core.feedforward import SquaredReLU
from zoo.models import BERT, GPT, Transformer, ViT
from zoo.models.bert import BERTConfig
from zoo.models.gpt import GPTConfig
from zoo.models.transformer import TransformerConfig
from zoo.models.vit import ViTConfig

D, H, B, T, S = 32, 4, 2, 9, 6  # H a power of two: the ALiBi slopes below are the geometric sequence
DK = D // H
EPS = 1e-6  # QK-norm's epsilon
TOL = dict(atol=1e-5, rtol=1e-5)


# --------------------------------------------------------------------------------------------------------------
# relu2


@torch.no_grad()
def test_relu2_inside_feedforward_is_squared_relu():
    torch.manual_seed(0)
    ff = FeedForward(D, 3 * D, activation="relu2").eval()
    x = torch.randn(B, T, D)
    hidden = x @ ff.fc1.weight.T + ff.fc1.bias
    expected = torch.clamp(hidden, min=0) ** 2 @ ff.fc2.weight.T + ff.fc2.bias
    torch.testing.assert_close(ff(x), expected, atol=1e-6, rtol=1e-6)
    assert (hidden < 0).any() and (hidden > 1).any()  # both sides of the kink and the square matter


def test_unknown_activation_lists_relu2():
    with pytest.raises(ValueError, match="activation.*relu2"):
        GPTConfig(activation="swish")


# --------------------------------------------------------------------------------------------------------------
# QK-norm: the attention module against softmax(norm(q) norm(k)^T / sqrt(d_k)) v written out


def _rms(t: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return t / torch.sqrt(t.pow(2).mean(dim=-1, keepdim=True) + EPS) * weight


def _rope(t: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Rotate channel pairs (2i, 2i+1) of t (..., T, dk) by the angle p * base^(-2i / dk) at positions p = 0.."""
    out = torch.empty_like(t)
    pos = torch.arange(t.shape[-2], dtype=torch.float32)[:, None]
    for i in range(t.shape[-1] // 2):
        angle = pos * base ** (-2 * i / t.shape[-1])
        a, b = t[..., 2 * i : 2 * i + 1], t[..., 2 * i + 1 : 2 * i + 2]
        out[..., 2 * i : 2 * i + 1] = a * angle.cos() - b * angle.sin()
        out[..., 2 * i + 1 : 2 * i + 2] = a * angle.sin() + b * angle.cos()
    return out


def _projections(attn: MultiHeadAttention, x, context, qk_proj):
    """The (W, b) of q, k and v read out of the module's fused matrices (None: the identity, qk_proj="none")."""
    d = attn.d_model
    if qk_proj == "none":
        return None, None, None
    if qk_proj == "shared":
        w, b = attn.qv.weight, attn.qv.bias
        return (w[:d], b[:d]), (w[:d], b[:d]), (w[d:], b[d:])
    if context is None:
        w, b = attn.qkv.weight, attn.qkv.bias
        return (w[:d], b[:d]), (w[d : 2 * d], b[d : 2 * d]), (w[2 * d :], b[2 * d :])
    w, b = attn.kv.weight, attn.kv.bias
    return (attn.q.weight, attn.q.bias), (w[:d], b[:d]), (w[d:], b[d:])


def _reference(
    attn: MultiHeadAttention,
    x: torch.Tensor,
    context: torch.Tensor | None = None,
    *,
    qk_proj: str = "separate",
    rope: bool = False,
    alibi: bool = False,
    causal: bool = False,
    window: int | None = None,
    n_queries: int | None = None,
) -> torch.Tensor:
    source = x if context is None else context
    pq, pk, pv = _projections(attn, x, context, qk_proj)
    q, k, v = (t if p is None else t @ p[0].T + p[1] for t, p in ((x, pq), (source, pk), (source, pv)))
    if n_queries is not None:
        q = q[:, :n_queries]
    i, j = torch.arange(q.shape[1])[:, None], torch.arange(k.shape[1])[None]
    allowed = torch.ones(q.shape[1], k.shape[1], dtype=torch.bool)
    if causal:
        allowed &= j <= i
    if window is not None:
        allowed &= (j > i - window) if causal else ((i - j).abs() <= window // 2)
    out = torch.empty(x.shape[0], q.shape[1], attn.d_model)
    for head in range(attn.n_heads):
        sl = slice(head * DK, (head + 1) * DK)
        qh, kh = _rms(q[..., sl], attn.q_norm.weight), _rms(k[..., sl], attn.k_norm.weight)
        if rope:
            qh, kh = _rope(qh), _rope(kh)
        scores = qh @ kh.transpose(1, 2) / math.sqrt(DK)
        if alibi:
            scores = scores - 2.0 ** (-8.0 * (head + 1) / attn.n_heads) * (i - j).abs()
        out[..., sl] = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1) @ v[..., sl]
    return out @ attn.out.weight.T + attn.out.bias


def _randomize_qk_norms(module: torch.nn.Module) -> None:
    """Learned scales away from their initial ones, so that a missing, doubled or swapped norm shows."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith(("q_norm.weight", "k_norm.weight")):
                p.uniform_(0.3, 2.0)


def _attn(impl: str, seed: int = 0, **kwargs) -> MultiHeadAttention:
    torch.manual_seed(seed)
    attn = MultiHeadAttention(D, H, impl=impl, qk_norm=True, **kwargs).eval()
    _randomize_qk_norms(attn)
    return attn


# (module options, reference options, forward options) of every self-attention path.
SELF_CASES = {
    "plain": ({}, {}, {}),
    "causal": ({}, dict(causal=True), dict(is_causal=True)),
    "rope": (dict(positions="rope"), dict(rope=True, causal=True), dict(is_causal=True)),
    "rope_bidirectional": (dict(positions="rope"), dict(rope=True), {}),
    "alibi": (dict(positions="alibi"), dict(alibi=True), {}),
    "alibi_causal": (dict(positions="alibi"), dict(alibi=True, causal=True), dict(is_causal=True)),
    "window_causal": (dict(attn_window=3), dict(window=3, causal=True), dict(is_causal=True)),
    "window_bidirectional": (dict(attn_window=4), dict(window=4), {}),
    "shared": (dict(qk_proj="shared"), dict(qk_proj="shared"), {}),
    "none": (dict(qk_proj="none"), dict(qk_proj="none", causal=True), dict(is_causal=True)),
    "n_queries": ({}, dict(n_queries=1), dict(n_queries=1)),
    "n_queries_causal": ({}, dict(n_queries=3, causal=True), dict(n_queries=3, is_causal=True)),
    "n_queries_shared": (dict(qk_proj="shared"), dict(qk_proj="shared", n_queries=2), dict(n_queries=2)),
}


@pytest.mark.parametrize("impl", ["sdpa", "explicit"])
@pytest.mark.parametrize("case", list(SELF_CASES))
@torch.no_grad()
def test_qk_norm_self_attention_matches_reference(impl, case):
    module_opts, ref_opts, forward_opts = SELF_CASES[case]
    attn = _attn(impl, **module_opts)
    x = torch.randn(B, T, D) * 3
    torch.testing.assert_close(attn(x, **forward_opts), _reference(attn, x, **ref_opts), **TOL)


@pytest.mark.parametrize("impl", ["sdpa", "explicit"])
@pytest.mark.parametrize("qk_proj", ["separate", "shared", "none"])
@torch.no_grad()
def test_qk_norm_cross_attention_matches_reference_and_caches_normalized_keys(impl, qk_proj):
    attn = _attn(impl, cross=True, qk_proj=qk_proj)
    x, context = torch.randn(B, T, D) * 3, torch.randn(B, S, D) * 3
    expected = _reference(attn, x, context, qk_proj=qk_proj)
    torch.testing.assert_close(attn(x, context), expected, **TOL)
    # With a cache the keys are computed and normalized at the first call and reused as they are.
    cache = LayerCache()
    torch.testing.assert_close(attn(x[:, :1], context, cache=cache), expected[:, :1], **TOL)
    pk = _projections(attn, x, context, qk_proj)[1]
    k = context if pk is None else context @ pk[0].T + pk[1]
    k = _rms(k.view(B, S, H, DK).transpose(1, 2), attn.k_norm.weight)
    torch.testing.assert_close(cache.cross_k, k, **TOL)
    for step in range(1, 4):
        torch.testing.assert_close(attn(x[:, step : step + 1], None, cache=cache), expected[:, step : step + 1], **TOL)


@torch.no_grad()
def test_qk_norm_cached_self_attention_keys_are_normalized_and_rotated():
    attn = _attn("sdpa", positions="rope")
    x = torch.randn(B, T, D) * 3
    cache = LayerCache()
    attn(x, is_causal=True, cache=cache)
    w, b = attn.qkv.weight[D : 2 * D], attn.qkv.bias[D : 2 * D]
    k = _rope(_rms((x @ w.T + b).view(B, T, H, DK).transpose(1, 2), attn.k_norm.weight))
    keys, _ = cache.append(torch.empty(B, H, 0, DK), torch.empty(B, H, 0, DK))
    torch.testing.assert_close(keys, k, **TOL)


def test_qk_norm_rejects_non_bool():
    with pytest.raises(ValueError, match="qk_norm must be true or false, got 'yes'"):
        MultiHeadAttention(D, H, qk_norm="yes")
    with pytest.raises(ValueError, match="qk_norm must be true or false, got 1"):
        GPTConfig(qk_norm=1)


def test_qk_norm_off_adds_nothing():
    torch.manual_seed(0)
    attn = MultiHeadAttention(D, H)
    assert attn.q_norm is None and attn.k_norm is None
    assert set(attn.state_dict()) == {"qkv.weight", "qkv.bias", "out.weight", "out.bias"}


# --------------------------------------------------------------------------------------------------------------
# In the models: incremental decoding, the class-token shortcut, training, switches, defaults


def _gpt(**overrides) -> GPT:
    torch.manual_seed(0)
    config = dict(vocab_size=50, block_size=32, n_layer=2, n_head=H, n_embd=D, activation="gelu")
    return GPT(GPTConfig(**{**config, **overrides}))


@pytest.mark.parametrize("positions", ["learned", "rope", "alibi"])
@pytest.mark.parametrize("chunks", [[1] * 10, [4, 1, 3, 2]])
@torch.no_grad()
def test_gpt_qk_norm_cached_decoding_matches_full_forward(positions, chunks):
    model = _gpt(qk_norm=True, positions=positions).eval()
    _randomize_qk_norms(model)
    idx = torch.randint(0, 50, (3, sum(chunks)), generator=torch.Generator().manual_seed(1))
    full = model(idx)
    cache, outs, start = KVCache(model.config.n_layer), [], 0
    for n in chunks:
        outs.append(model(idx[:, start : start + n], cache=cache))
        start += n
    torch.testing.assert_close(torch.cat(outs, dim=1), full, **TOL)


def _transformer(**overrides) -> Transformer:
    torch.manual_seed(0)
    config = dict(
        src_vocab_size=40, d_model=D, n_heads=H, d_ff=2 * D, n_encoder_layers=1, n_decoder_layers=2, max_len=32
    )
    return Transformer(TransformerConfig(**{**config, **overrides}))


@pytest.mark.parametrize("positions", ["sinusoidal", "rope"])
@torch.no_grad()
def test_transformer_qk_norm_cached_decoding_matches_full_decode(positions):
    """Self- and cross-attention keys enter the cache normalized once: stepwise decoding equals the full one."""
    model = _transformer(qk_norm=True, positions=positions, norm_first=True).eval()
    _randomize_qk_norms(model)
    gen = torch.Generator().manual_seed(1)
    src, tgt = torch.randint(3, 40, (2, 7), generator=gen), torch.randint(3, 40, (2, 6), generator=gen)
    memory = model.encode(src)
    full = model.decode(tgt, memory)
    cache = KVCache(model.config.n_decoder_layers)
    steps = [model.decode(tgt[:, i : i + 1], memory, cache=cache) for i in range(tgt.shape[1])]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, **TOL)


def _vit(**overrides) -> ViT:
    torch.manual_seed(0)
    config = dict(image_size=16, patch_size=4, in_channels=3, num_classes=5, embed_dim=D, depth=2, num_heads=H)
    return ViT(ViTConfig(**{**config, "mlp_dim": 2 * D, **overrides}))


@torch.no_grad()
def test_vit_qk_norm_class_token_shortcut_matches_full_forward():
    model = _vit(qk_norm=True).eval()
    _randomize_qk_norms(model)
    images = torch.randn(3, 3, 16, 16)
    full = model.forward_features(images)
    torch.testing.assert_close(model.forward_features(images, class_token_only=True), full[:, :1], **TOL)
    torch.testing.assert_close(model(images), model.forward_head(full), **TOL)


def _bert(**overrides) -> BERT:
    torch.manual_seed(0)
    config = dict(
        vocab_size=50, hidden_size=D, num_hidden_layers=2, num_attention_heads=H, intermediate_size=2 * D,
        max_position_embeddings=32,
    )  # fmt: skip
    return BERT(BERTConfig(**{**config, **overrides}))


def _loss(model, kind: str) -> torch.Tensor:
    gen = torch.Generator().manual_seed(2)
    if kind == "gpt":
        return model(torch.randint(0, 50, (2, 8), generator=gen)).pow(2).mean()
    if kind == "bert":
        out = model(torch.randint(1, 50, (2, 8), generator=gen))
        return out.mlm_logits.pow(2).mean() + out.nsp_logits.pow(2).mean()
    if kind == "vit":
        return model(torch.randn(2, 3, 16, 16, generator=gen)).pow(2).mean()
    src, tgt = torch.randint(3, 40, (2, 7), generator=gen), torch.randint(3, 40, (2, 5), generator=gen)
    return model(src, tgt).pow(2).mean()


MODELS = {
    "gpt": lambda **kw: _gpt(activation="relu2", **kw),
    "bert": lambda **kw: _bert(hidden_act="relu2", **kw),
    "vit": lambda **kw: _vit(activation="relu2", **kw),
    "transformer": lambda **kw: _transformer(activation="relu2", **kw),
}


@pytest.mark.parametrize("kind", list(MODELS))
def test_models_train_with_qk_norm_and_relu2(kind):
    model = MODELS[kind](qk_norm=True).train()
    assert all(isinstance(m.act, SquaredReLU) for m in model.modules() if isinstance(m, FeedForward))
    _loss(model, kind).backward()
    norms = {n: p for n, p in model.named_parameters() if n.endswith(("q_norm.weight", "k_norm.weight"))}
    attentions = sum(isinstance(m, MultiHeadAttention) for m in model.modules())
    assert len(norms) == 2 * attentions  # the Transformer's cross-attentions have theirs too
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    for name, p in norms.items():
        assert p.grad.abs().sum() > 0, name


@pytest.mark.parametrize("kind", list(MODELS))
def test_nondefault_switches_report_qk_norm(kind):
    assert MODELS[kind](qk_norm=True).nondefault_switches()["qk_norm"] is True
    assert "qk_norm" not in MODELS[kind]().nondefault_switches()


def test_vit_with_another_activation_is_not_the_reference():
    """Every reference ViT computes the exact GELU, and the exporters write that one: refuse anything else."""
    assert _vit(activation="relu2").nondefault_switches() == {"activation": "relu2"}
    assert _vit().nondefault_switches() == {}


def test_default_models_have_no_qk_norm_parameters():
    """Defaults unchanged: no new keys; qk_norm=True adds exactly one q and one k scale per attention."""
    default = GPT.from_preset("gpt-nano", vocab_size=50)
    spelled = GPT.from_preset("gpt-nano", vocab_size=50, qk_norm=False)
    assert not any("q_norm" in k or "k_norm" in k for k in default.state_dict())
    on = GPT.from_preset("gpt-nano", vocab_size=50, qk_norm=True)
    extra = set(on.state_dict()) - set(default.state_dict())
    assert extra == {f"blocks.layers.{i}.self_attn.{n}_norm.weight" for i in range(2) for n in "qk"}
    assert set(default.state_dict()) <= set(on.state_dict())
    assert set(spelled.state_dict()) == set(default.state_dict())
    for kind, build in MODELS.items():
        keys = set(build().state_dict())
        assert not any("q_norm" in k or "k_norm" in k for k in keys), kind


@torch.no_grad()
def test_qk_norm_in_float32_under_bf16_autocast():
    """Under bf16 autocast the norm still returns bf16 q and k (SDPA needs one dtype) and stays finite."""
    attn = _attn("sdpa")
    x = torch.randn(B, T, D)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = attn(x, is_causal=True)
    assert y.dtype == torch.bfloat16 and torch.isfinite(y).all()
    torch.testing.assert_close(y.float(), _reference(attn, x, causal=True), atol=5e-2, rtol=5e-2)


def test_squared_relu_gradient():
    x = torch.tensor([-1.5, -0.1, 0.0, 0.3, 2.0], requires_grad=True)
    SquaredReLU()(x).sum().backward()
    torch.testing.assert_close(x.grad, 2 * F.relu(x.detach()))


@torch.no_grad()
def test_bn_vit_with_qk_norm_folds_to_the_same_logits():
    """QK-norm acts after the projection, so folding the pre-norm BatchNorm into qkv stays exact."""
    model = _vit(qk_norm=True, norm="batchnorm", ff_inner_norm="batchnorm")
    _randomize_qk_norms(model)
    gen = torch.Generator().manual_seed(3)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm1d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=gen))
            m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
            m.weight.copy_(1 + 0.5 * torch.randn(m.num_features, generator=gen))
    images = torch.randn(3, 3, 16, 16)
    expected = model.eval()(images)
    folded = fold_batchnorms(model)
    assert folded.folded_batchnorms == 3 * model.config.depth + 1  # norm1, norm2 and the inner norm; the final one
    torch.testing.assert_close(folded(images), expected, **TOL)
