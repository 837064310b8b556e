"""Tests of zoo.core attention: SDPA vs explicit paths, masks, causality, KV cache, blocks and bad options."""

from __future__ import annotations

import math

import pytest
import torch

from zoo.core import (
    Block,
    BlockStack,
    FeedForward,
    LayerCache,
    MultiHeadAttention,
    build_attention_mask,
)

D, H, B, T = 48, 4, 2, 7
TOL = dict(atol=1e-5, rtol=1e-5)


def _attn_pair(cross: bool = False, seed: int = 0) -> tuple[MultiHeadAttention, MultiHeadAttention]:
    torch.manual_seed(seed)
    sdpa = MultiHeadAttention(D, H, cross=cross, impl="sdpa").eval()
    explicit = MultiHeadAttention(D, H, cross=cross, impl="explicit").eval()
    explicit.load_state_dict(sdpa.state_dict())
    return sdpa, explicit


def _reference_self_attention(attn: MultiHeadAttention, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """softmax(Q K^T / sqrt(d_k)) V written out from the module's qkv/out weights; mask: (T, S) or None."""
    b, t, d = x.shape
    dk = d // attn.n_heads
    w, bias = attn.qkv.weight, attn.qkv.bias
    q = x @ w[:d].T + bias[:d]
    k = x @ w[d : 2 * d].T + bias[d : 2 * d]
    v = x @ w[2 * d :].T + bias[2 * d :]
    out = torch.empty(b, t, d)
    for head in range(attn.n_heads):
        sl = slice(head * dk, (head + 1) * dk)
        scores = q[..., sl] @ k[..., sl].transpose(1, 2) / math.sqrt(dk)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        out[..., sl] = torch.softmax(scores, dim=-1) @ v[..., sl]
    return out @ attn.out.weight.T + attn.out.bias


# --------------------------------------------------------------------------------------------------------------
# SDPA path vs explicit path


@torch.no_grad()
def test_sdpa_matches_explicit_without_mask():
    """Unmasked self-attention gives the same output on the SDPA and the explicit path."""
    sdpa, explicit = _attn_pair()
    x = torch.randn(B, T, D)
    torch.testing.assert_close(sdpa(x), explicit(x), **TOL)


@torch.no_grad()
def test_sdpa_matches_explicit_causal():
    """Causal self-attention (is_causal=True) gives the same output on both paths."""
    sdpa, explicit = _attn_pair()
    x = torch.randn(B, T, D)
    torch.testing.assert_close(sdpa(x, is_causal=True), explicit(x, is_causal=True), **TOL)
    # And causality really changes the result (the flag is not ignored).
    assert (sdpa(x, is_causal=True) - sdpa(x)).abs().max() > 1e-3


@torch.no_grad()
def test_sdpa_matches_explicit_with_padding_mask():
    """A boolean left-padding + causal mask from build_attention_mask gives the same output on both paths."""
    sdpa, explicit = _attn_pair()
    x = torch.randn(B, T, D)
    keep = torch.ones(B, T, dtype=torch.long)
    keep[1, :3] = 0  # left padding in row 1
    for causal in (False, True):
        mask = build_attention_mask(keep, T, T, causal=causal)
        a, b = sdpa(x, mask=mask), explicit(x, mask=mask)
        assert torch.isfinite(a).all() and torch.isfinite(b).all()
        torch.testing.assert_close(a, b, **TOL)


@torch.no_grad()
def test_sdpa_matches_explicit_cross_attention():
    """Cross-attention to a context of another length (optionally key-padded) agrees on both paths."""
    sdpa, explicit = _attn_pair(cross=True)
    x, ctx = torch.randn(B, T, D), torch.randn(B, 11, D)
    torch.testing.assert_close(sdpa(x, ctx), explicit(x, ctx), **TOL)
    keep = torch.ones(B, 11, dtype=torch.long)
    keep[0, 8:] = 0
    mask = build_attention_mask(keep, T, 11, causal=False)
    torch.testing.assert_close(sdpa(x, ctx, mask=mask), explicit(x, ctx, mask=mask), **TOL)
    assert sdpa(x, ctx).shape == (B, T, D)


@torch.no_grad()
def test_explicit_path_matches_handwritten_reference():
    """The explicit path equals softmax(QK^T/sqrt(d_k))V computed here from the module's own weights."""
    torch.manual_seed(1)
    attn = MultiHeadAttention(D, H, impl="explicit").eval()
    x = torch.randn(B, T, D)
    torch.testing.assert_close(attn(x), _reference_self_attention(attn, x, None), **TOL)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    torch.testing.assert_close(attn(x, is_causal=True), _reference_self_attention(attn, x, causal), **TOL)


@pytest.mark.parametrize("attn_scale", ["sqrt_dk", "none", 0.3])
@pytest.mark.parametrize("is_causal", [False, True])
def test_explicit_fused_scores_give_the_written_out_gradients(attn_scale, is_causal):
    """The explicit path's one-GEMM scores (scale and causal bias inside baddbmm) give the output and the input and
    weight gradients of the written-out form (q @ k^T * scale, masked_fill with -inf) that a padding mask still
    takes, and zero gradient from the keys a query may not see."""
    torch.manual_seed(5)
    fused = MultiHeadAttention(D, H, impl="explicit", attn_scale=attn_scale)
    written = MultiHeadAttention(D, H, impl="explicit", attn_scale=attn_scale)
    written.load_state_dict(fused.state_dict())
    x = torch.randn(B, T, D)
    allowed = torch.ones(T, T, dtype=torch.bool)
    if is_causal:
        allowed = allowed.tril()
    results = []
    for module, kwargs in ((fused, dict(is_causal=is_causal)), (written, dict(mask=allowed))):
        xi = x.clone().requires_grad_()
        out = module(xi, **kwargs)
        out[:, 2].sum().backward()  # query 2 only: with causality, positions 3.. must get no gradient
        results.append((out, xi.grad, module.qkv.weight.grad))
    for a, b in zip(*results):
        torch.testing.assert_close(a, b, **TOL)
    beyond = results[0][1][:, 3:]
    assert (beyond == 0).all() if is_causal else beyond.abs().sum() > 0


@torch.no_grad()
def test_explicit_path_records_normalized_weights():
    """record_weights keeps (B, H, T, S) weights that sum to one per query and are zero above the diagonal."""
    torch.manual_seed(2)
    attn = MultiHeadAttention(D, H, impl="sdpa").eval()
    attn.record_weights = True
    attn(torch.randn(B, T, D), is_causal=True)
    w = attn.last_weights
    assert w.shape == (B, H, T, T)
    torch.testing.assert_close(w.sum(-1), torch.ones(B, H, T), **TOL)
    assert (w.triu(diagonal=1) == 0).all()


# --------------------------------------------------------------------------------------------------------------
# Causality of blocks


@pytest.mark.parametrize("impl", ["sdpa", "explicit"])
@pytest.mark.parametrize("norm_first", [True, False])
@torch.no_grad()
def test_block_stack_is_causal(impl, norm_first):
    """Changing the input at position t leaves BlockStack outputs before t unchanged but changes position t."""
    torch.manual_seed(3)
    stack = BlockStack(2, D, final_norm=norm_first, n_heads=H, d_ff=4 * D, norm_first=norm_first, attn_impl=impl).eval()
    x = torch.randn(B, 10, D)
    base = stack(x, is_causal=True)
    for t in (0, 4, 9):
        x2 = x.clone()
        x2[:, t] += torch.randn(B, D)
        out = stack(x2, is_causal=True)
        torch.testing.assert_close(out[:, :t], base[:, :t], atol=1e-6, rtol=0)
        assert (out[:, t] - base[:, t]).abs().max() > 1e-3


@torch.no_grad()
def test_single_block_is_causal():
    """A single Block under is_causal=True lets position t influence only positions >= t."""
    torch.manual_seed(4)
    block = Block(D, H, 4 * D).eval()
    x = torch.randn(1, 8, D)
    x2 = x.clone()
    x2[0, 5] = torch.randn(D)
    a, b = block(x, is_causal=True), block(x2, is_causal=True)
    torch.testing.assert_close(a[:, :5], b[:, :5], atol=1e-6, rtol=0)
    assert (a[:, 5:] - b[:, 5:]).abs().amax(-1).min() > 1e-4


# --------------------------------------------------------------------------------------------------------------
# build_attention_mask


def test_causal_mask_with_cached_prefix():
    """With q_len < k_len, query i (absolute position i + offset) sees exactly keys 0..i+offset."""
    q_len, k_len = 3, 8
    offset = k_len - q_len
    mask = build_attention_mask(None, q_len, k_len, causal=True)
    assert mask.dtype == torch.bool
    mask = mask.expand(1, 1, q_len, k_len)[0, 0]
    for i in range(q_len):
        for j in range(k_len):
            assert bool(mask[i, j]) == (j <= i + offset), (i, j)
    # Same answer when a (no-padding) key mask is passed.
    with_keys = build_attention_mask(torch.ones(2, k_len), q_len, k_len, causal=True)
    assert with_keys.shape == (2, 1, q_len, k_len)
    assert torch.equal(with_keys[0, 0], mask) and torch.equal(with_keys[1, 0], mask)


def test_key_padding_mask_hides_padded_keys():
    """Non-causally, padded keys are masked for every query and real keys are visible to every query."""
    keep = torch.tensor([[1, 1, 1, 0, 0], [0, 1, 1, 1, 1]])
    mask = build_attention_mask(keep, 4, 5, causal=False)
    full = mask.expand(2, 1, 4, 5)
    assert torch.equal(full, keep.bool()[:, None, None, :].expand(2, 1, 4, 5))
    assert not full[0, 0, :, 3:].any() and not full[1, 0, :, 0].any()


def test_key_padding_with_causality_and_offset():
    """Key padding and causality combine: a real query sees real keys at or before its position only."""
    keep = torch.tensor([[0, 0, 1, 1, 1, 1]])
    mask = build_attention_mask(keep, 2, 6, causal=True)[0, 0]
    expected = torch.tensor([[0, 0, 1, 1, 1, 0], [0, 0, 1, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(mask, expected)


def test_left_padding_query_row_sees_itself():
    """Under causality a left-padding query row is never fully False: it may attend to itself."""
    keep = torch.tensor([[0, 0, 0, 1, 1], [1, 1, 1, 1, 1]])
    mask = build_attention_mask(keep, 5, 5, causal=True)
    assert mask.any(-1).all()
    # Padding query 1 of row 0 sees only itself; real query 3 sees only real keys 3 (not padding 0..2).
    assert mask[0, 0, 1].tolist() == [False, True, False, False, False]
    assert mask[0, 0, 3].tolist() == [False, False, False, True, False]
    assert torch.equal(mask[1, 0], torch.ones(5, 5, dtype=torch.bool).tril())


@torch.no_grad()
def test_left_padding_mask_gives_finite_attention():
    """Attention with a left-padding causal mask has no NaN, and real rows equal the unpadded computation."""
    torch.manual_seed(5)
    attn = MultiHeadAttention(D, H, impl="sdpa").eval()
    real = torch.randn(1, 4, D)
    padded = torch.cat([torch.randn(1, 3, D), real], dim=1)
    keep = torch.tensor([[0, 0, 0, 1, 1, 1, 1]])
    out = attn(padded, mask=build_attention_mask(keep, 7, 7, causal=True))
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out[:, 3:], attn(real, is_causal=True), **TOL)


def test_mask_is_none_when_nothing_to_mask():
    """build_attention_mask returns None without padding when non-causal, or causal with a single query."""
    assert build_attention_mask(None, 4, 4, causal=False) is None
    assert build_attention_mask(None, 1, 9, causal=True) is None
    assert build_attention_mask(None, 1, 1, causal=True) is None
    assert build_attention_mask(None, 2, 2, causal=True) is not None


def test_mask_length_mismatch_raises():
    """A key mask that does not cover all keys is rejected with a message naming both lengths."""
    with pytest.raises(ValueError, match=r"4 positions.*6"):
        build_attention_mask(torch.ones(1, 4), 2, 6, causal=True)


# --------------------------------------------------------------------------------------------------------------
# KV cache at the attention level


@pytest.mark.parametrize("impl", ["sdpa", "explicit"])
@pytest.mark.parametrize("chunks", [[1] * 7, [3, 1, 1, 2], [5, 2]])
@torch.no_grad()
def test_cached_attention_matches_full_causal(impl, chunks):
    """Causal self-attention in one call equals running it in chunks with a LayerCache."""
    torch.manual_seed(6)
    attn = MultiHeadAttention(D, H, impl=impl).eval()
    x = torch.randn(B, sum(chunks), D)
    full = attn(x, is_causal=True)
    cache, outs, start = LayerCache(), [], 0
    for n in chunks:
        outs.append(attn(x[:, start : start + n], is_causal=True, cache=cache))
        start += n
        assert cache.length == start
    torch.testing.assert_close(torch.cat(outs, dim=1), full, **TOL)


@torch.no_grad()
def test_cross_attention_cache_reuses_context():
    """A cross-attention LayerCache stores the context keys/values once and reuses them without a context."""
    torch.manual_seed(7)
    attn = MultiHeadAttention(D, H, cross=True, impl="sdpa").eval()
    x, ctx = torch.randn(B, 3, D), torch.randn(B, 5, D)
    cache = LayerCache()
    first = attn(x[:, :1], ctx, cache=cache)
    assert cache.cross_k is not None and cache.cross_k.shape == (B, H, 5, D // H)
    second = attn(x[:, 1:], None, cache=cache)
    torch.testing.assert_close(torch.cat([first, second], dim=1), attn(x, ctx), **TOL)
    with pytest.raises(ValueError, match="context"):
        attn(x, None)


def test_layer_cache_grows_beyond_initial_capacity():
    """Appending one position at a time past the initial buffer keeps every earlier key/value intact."""
    torch.manual_seed(8)
    cache = LayerCache()
    ks = torch.randn(2, H, 70, 3)
    vs = torch.randn(2, H, 70, 3)
    for i in range(70):
        k, v = cache.append(ks[:, :, i : i + 1], vs[:, :, i : i + 1])
    assert cache.length == 70
    assert torch.equal(k, ks) and torch.equal(v, vs)


def test_layer_cache_reorder_selects_batch_rows():
    """LayerCache.reorder keeps the histories of the selected batch rows, in the given order."""
    torch.manual_seed(9)
    cache = LayerCache()
    k1, v1 = torch.randn(3, H, 4, 5), torch.randn(3, H, 4, 5)
    cache.append(k1, v1)
    cache.cross_k, cache.cross_v = torch.randn(3, H, 6, 5), torch.randn(3, H, 6, 5)
    cross_k = cache.cross_k.clone()
    index = torch.tensor([2, 0, 0])
    cache.reorder(index)
    k2, v2 = torch.randn(3, H, 1, 5), torch.randn(3, H, 1, 5)
    k, v = cache.append(k2, v2)
    assert torch.equal(k, torch.cat([k1[index], k2], dim=2))
    assert torch.equal(v, torch.cat([v1[index], v2], dim=2))
    assert torch.equal(cache.cross_k, cross_k[index])


# --------------------------------------------------------------------------------------------------------------
# Bad options


def test_indivisible_heads_raise_with_both_numbers():
    """MultiHeadAttention(50, 4) raises ValueError whose message mentions 50 and 4."""
    with pytest.raises(ValueError) as err:
        MultiHeadAttention(50, 4)
    assert "50" in str(err.value) and "4" in str(err.value)


def test_nonpositive_sizes_raise():
    """Zero heads or zero width are rejected (rather than dividing by zero)."""
    with pytest.raises(ValueError):
        MultiHeadAttention(48, 0)
    with pytest.raises(ValueError):
        MultiHeadAttention(0, 4)


def test_unknown_attention_impl_raises():
    """An unknown impl name raises ValueError naming it."""
    with pytest.raises(ValueError, match="flash3"):
        MultiHeadAttention(D, H, impl="flash3")


def test_unknown_activation_raises():
    """FeedForward with an unknown activation raises ValueError naming the activation."""
    with pytest.raises(ValueError, match="swish"):
        FeedForward(D, 4 * D, activation="swish")


# --------------------------------------------------------------------------------------------------------------
# Post-LN vs pre-LN


@pytest.mark.parametrize("is_causal", [False, True])
@torch.no_grad()
def test_post_ln_block_composition(is_causal):
    """Block(norm_first=False) computes norm2(h + ff(h)) with h = norm1(x + self_attn(x))."""
    torch.manual_seed(10)
    block = Block(D, H, 4 * D, norm_first=False).eval()
    x = torch.randn(B, T, D)
    h = block.norm1(x + block.self_attn(x, is_causal=is_causal))
    expected = block.norm2(h + block.ff(h))
    torch.testing.assert_close(block(x, is_causal=is_causal), expected, **TOL)


@pytest.mark.parametrize("is_causal", [False, True])
@torch.no_grad()
def test_pre_ln_block_composition(is_causal):
    """Block(norm_first=True) computes h + ff(norm2(h)) with h = x + self_attn(norm1(x))."""
    torch.manual_seed(11)
    block = Block(D, H, 4 * D, norm_first=True).eval()
    x = torch.randn(B, T, D)
    h = x + block.self_attn(block.norm1(x), is_causal=is_causal)
    expected = h + block.ff(block.norm2(h))
    out = block(x, is_causal=is_causal)
    torch.testing.assert_close(out, expected, **TOL)
    # Pre-LN output is not normalized, unlike post-LN output (the two really differ).
    post = Block(D, H, 4 * D, norm_first=False).eval()
    post.load_state_dict(block.state_dict())
    assert (post(x, is_causal=is_causal) - out).abs().max() > 1e-2


@pytest.mark.parametrize("norm_first", [False, True])
@torch.no_grad()
def test_block_with_cross_attention_composition(norm_first):
    """A decoder Block composes self-attention, cross-attention and feed-forward in the documented order."""
    torch.manual_seed(12)
    block = Block(D, H, 4 * D, norm_first=norm_first, cross_attention=True).eval()
    x, ctx = torch.randn(B, T, D), torch.randn(B, 9, D)
    if norm_first:
        h = x + block.self_attn(block.norm1(x), is_causal=True)
        h = h + block.cross_attn(block.norm_cross(h), ctx)
        expected = h + block.ff(block.norm2(h))
    else:
        h = block.norm1(x + block.self_attn(x, is_causal=True))
        h = block.norm_cross(h + block.cross_attn(h, ctx))
        expected = block.norm2(h + block.ff(h))
    torch.testing.assert_close(block(x, is_causal=True, context=ctx), expected, **TOL)


def test_auto_path_choice_per_device_dtype_and_mode():
    """auto: explicit only when training on CPU under autocast (SDPA's backward is slow there); SDPA without
    autocast and without gradients (evaluation, generation)."""
    attn = MultiHeadAttention(D, H)
    x = torch.randn(2, 5, D)
    assert not attn._use_explicit(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert attn._use_explicit(x)
        with torch.no_grad():
            assert not attn._use_explicit(x)
    attn.record_weights = True
    with torch.no_grad():
        assert attn._use_explicit(x)


@pytest.mark.parametrize("impl", ["sdpa", "explicit"])
@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("masking", ["none", "causal", "padding"])
def test_stack_n_outputs_equals_first_rows_of_full_output(impl, norm_first, masking):
    """Computing only the first positions in the last layer gives exactly those rows of the full stack's
    output, with and without masks, and the same gradients for every weight."""
    torch.manual_seed(0)
    stack = BlockStack(2, D, final_norm=True, n_heads=H, d_ff=2 * D, norm_first=norm_first, attn_impl=impl)
    x = torch.randn(B, T, D)
    keep = torch.ones(B, T, dtype=torch.long)
    keep[1, -2:] = 0
    mask = build_attention_mask(keep, T, T, causal=False) if masking == "padding" else None
    kwargs = dict(mask=mask, is_causal=masking == "causal")

    def run(n_outputs):
        stack.zero_grad()
        out = stack(x, n_outputs=n_outputs, **kwargs)[:, :2]
        out.square().sum().backward()
        return out.detach(), [p.grad.clone() for p in stack.parameters()]

    (fast, fast_grads), (full, full_grads) = run(2), run(None)
    assert fast.shape == (B, 2, D)
    torch.testing.assert_close(fast, full, **TOL)
    for a, b in zip(fast_grads, full_grads):
        torch.testing.assert_close(a, b, **TOL)


def test_n_queries_rejects_cross_attention_and_cache():
    attn = MultiHeadAttention(D, H, cross=True)
    with pytest.raises(ValueError, match="n_queries is for self-attention"):
        attn(torch.randn(B, T, D), torch.randn(B, 3, D), n_queries=1)


def test_qk_norm_written_out_backward_matches_autograd_of_rms_norm():
    from zoo.core.attention import HeadRMSNorm, _RMSNormFunction

    x = torch.randn(3, 2, 5, 8, dtype=torch.float64, requires_grad=True)
    weight = (torch.rand(8, dtype=torch.float64) + 0.5).requires_grad_()
    assert torch.autograd.gradcheck(lambda a, w: _RMSNormFunction.apply(a, w, 1e-6), (x, weight))
    norm = HeadRMSNorm(8, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(weight.float())
    ours, theirs = x.detach().float().requires_grad_(), x.detach().float().requires_grad_()
    grad = torch.randn(3, 2, 5, 8)
    norm(ours).backward(grad)
    reference = torch.nn.functional.rms_norm(theirs, (8,), norm.weight.detach().requires_grad_(), 1e-6)
    reference.backward(grad)
    torch.testing.assert_close(ours.grad, theirs.grad)
    assert norm(ours.detach().bfloat16()).dtype == torch.bfloat16  # computed in float32, returned in the input's dtype
