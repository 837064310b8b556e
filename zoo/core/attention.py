"""Multi-head attention for self- and cross-attention, with an SDPA fast path and an explicit reference path."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .kv_cache import LayerCache
from .masks import build_attention_mask
from .positions import RotaryEmbedding, alibi_bias, alibi_slopes
from .window import check_window, window_covers, windowed_attention

# "sdpa": torch's fused scaled_dot_product_attention (flash / memory-efficient kernels on GPU).
# "explicit": softmax(Q K^T / sqrt(d_k)) V written out; it can return the attention weights.
# "auto": per device, dtype and mode. On CPU under bf16 autocast the backward of SDPA is slow (about 2x the
#   explicit path for ViT-sized problems), so auto takes the explicit path when training there; without
#   gradients (evaluation, generation) SDPA is the faster one (240 greedy tokens with the GPT benchmark
#   model under bf16 autocast: 870 ms explicit, 691 ms SDPA at batch 1), and auto takes SDPA everywhere else.
ATTENTION_IMPLS = ("auto", "sdpa", "explicit")
# The lab's switches (names as in the model configs). attn_scale may also be a positive number.
ATTN_SCALES = ("sqrt_dk", "none")
ATTN_SCORES = ("dot", "additive")
QK_PROJS = ("separate", "shared", "none")
SELF_ATTENTION_POSITIONS = (None, "rope", "alibi")
# QK-norm's epsilon, one value for every model rather than each model's LayerNorm eps (BERT's 1e-12 is a
# TensorFlow legacy of the residual stream's norm): 1e-6 as in ViT-22B and timm's q_norm/k_norm, negligible
# next to the mean square of a projected head vector.
QK_NORM_EPS = 1e-6


class _RMSNormFunction(torch.autograd.Function):
    """RMSNorm over the last dimension with its backward written out. Why by hand: on the CPU F.rms_norm is a
    composite of pow / mean / rsqrt / mul whose autograd backward takes about twice the passes; this one saves
    x * rsqrt(mean(x^2)) and computes the input's gradient in three, the same numbers to float32 rounding (measured
    faster at QK-norm shapes: docs/performance.md)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        inv_rms = torch.rsqrt(x.square().mean(-1, keepdim=True).add_(eps))
        normed = x * inv_rms
        ctx.save_for_backward(normed, inv_rms, weight)
        return normed * weight

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        normed, inv_rms, weight = ctx.saved_tensors
        grad_weight = (grad * normed).sum(dim=tuple(range(grad.dim() - 1)))
        scaled = grad * weight
        grad_x = (scaled - normed * (scaled * normed).mean(-1, keepdim=True)) * inv_rms
        return grad_x, grad_weight, None


class HeadRMSNorm(nn.RMSNorm):
    """RMSNorm over the last (head) dimension, computed in float32 and returned in the input's dtype: under bf16
    autocast q and k arrive in bf16 while the scale is float32, and nn.RMSNorm would warn and take its unfused path."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _RMSNormFunction.apply(x.float(), self.weight, self.eps).to(x.dtype)


def check_attention_options(attn_scale="sqrt_dk", attn_score="dot", qk_proj="separate", attn_window=None) -> None:
    """One-line errors naming the option and its allowed values."""
    number = isinstance(attn_scale, (int, float)) and not isinstance(attn_scale, bool)
    if not (
        attn_scale in ATTN_SCALES
        if isinstance(attn_scale, str)
        else number and math.isfinite(attn_scale) and attn_scale > 0
    ):
        raise ValueError(f"unknown attn_scale {attn_scale!r}; choose one of: sqrt_dk, none, or a positive number")
    if attn_score not in ATTN_SCORES:
        raise ValueError(f"unknown attn_score {attn_score!r}; choose one of: {', '.join(ATTN_SCORES)}")
    if qk_proj not in QK_PROJS:
        raise ValueError(f"unknown qk_proj {qk_proj!r}; choose one of: {', '.join(QK_PROJS)}")
    check_window(attn_window)


class MultiHeadAttention(nn.Module):
    """Multi-head attention.

    Self-attention projects Q, K and V with one fused matrix (`qkv`); cross-attention projects the queries
    from `x` (`q`) and keys/values from `context` with one fused matrix (`kv`). Masks are boolean with True
    meaning "may attend" (see `masks.build_attention_mask`).

    The lab's switches (defaults = the published models, on the SDPA fast path):
    - attn_scale: "sqrt_dk" (logits * 1/sqrt(d_k)), "none" (* 1), or a number c (* c); applies to either score.
    - attn_score: "dot" (q . k) or "additive" (Bahdanau: v_h^T tanh(q_i + k_j) on the projected q and k, with a
      learned vector `score_v[h]` per head; use attn_scale="none" for the unscaled form of the literature).
    - qk_proj: "separate" (W_q, W_k, W_v), "shared" (`qv`: rows [0, d) are the one matrix serving Q and K, rows
      [d, 2d) are W_v; cross-attention applies it to x for Q and to the context for K), or "none" (q = k = v =
      the input split into heads; no Q/K/V parameters, only the output projection `out`).
    - positions (self-attention only): "rope" rotates q and k (keys are cached rotated), "alibi" adds
      -slope_h * |i - j| to the logits; absolute positions are the cached length + the query index.
    - qk_norm: QK-norm (Henry et al. 2020; Dehghani et al. 2023, "Scaling Vision Transformers to 22B"): an RMSNorm
      with a learned scale over each head's dimension, one for q (`q_norm`) and one for k (`k_norm`), after the
      projection and before RoPE and the scores; it bounds the logits, which otherwise can grow until the softmax
      saturates. Keys are cached normalized (and rotated), cross-attention keys too, so each is normalized once.
    - attn_window: None or w, local attention of `window.py` (self-attention only). When the window hides
      nothing (w >= keys causally, w // 2 >= keys - 1 bidirectionally) the ordinary path runs. With a window,
      `is_causal` applies together with `mask` (which may be a key padding mask (B, 1, 1, S)).
    Non-default scores, windows and recording take the explicit path; a scale, RoPE and ALiBi (as a float
    attn_mask) stay on SDPA, where they are exact.

    Inspection (for probes): set `record_weights = True` and every forward keeps, detached, `last_logits` (the
    (B, H, T, S) pre-softmax logits after scale and position bias, -inf where masked or outside the window) and
    `last_weights` (the softmax of those, before dropout). Recording forces the explicit path.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        dropout: float = 0.0,
        bias: bool = True,
        cross: bool = False,
        impl: str = "auto",
        attn_scale: str | float = "sqrt_dk",
        attn_score: str = "dot",
        qk_proj: str = "separate",
        positions: str | None = None,
        rope_base: float = 10000.0,
        attn_window: int | None = None,
        qk_norm: bool = False,
    ) -> None:
        super().__init__()
        if d_model <= 0 or n_heads <= 0:
            raise ValueError(f"d_model ({d_model}) and n_heads ({n_heads}) must be positive")
        if d_model % n_heads:
            raise ValueError(
                f"d_model={d_model} is not divisible by n_heads={n_heads}; pick a head count that divides the width"
            )
        if impl not in ATTENTION_IMPLS:
            raise ValueError(f"unknown attention impl '{impl}'; choose one of {', '.join(ATTENTION_IMPLS)}")
        check_attention_options(attn_scale, attn_score, qk_proj, attn_window)
        if positions not in SELF_ATTENTION_POSITIONS or (cross and positions is not None):
            raise ValueError(
                f"attention positions must be rope, alibi or None (self-attention only), got {positions!r}"
            )
        if cross and attn_window is not None:
            raise ValueError("attn_window is for self-attention; cross-attention sees the whole context")
        if not isinstance(qk_norm, bool):
            raise ValueError(f"qk_norm must be true or false, got {qk_norm!r}")
        self.d_model, self.n_heads, self.head_dim = d_model, n_heads, d_model // n_heads
        self.cross, self.impl, self.dropout = cross, impl, dropout
        self.attn_score, self.qk_proj, self.window = attn_score, qk_proj, attn_window
        # scale: what the explicit path multiplies the logits by; sdpa_scale: SDPA's `scale=` (None = its 1/sqrt(d)).
        self.scale = {"sqrt_dk": 1.0 / math.sqrt(self.head_dim), "none": None}.get(attn_scale, attn_scale)
        self.sdpa_scale = {"sqrt_dk": None, "none": 1.0}.get(attn_scale, attn_scale)
        if qk_proj == "separate" and cross:
            self.q = nn.Linear(d_model, d_model, bias=bias)
            self.kv = nn.Linear(d_model, 2 * d_model, bias=bias)
        elif qk_proj == "separate":
            self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        elif qk_proj == "shared":
            self.qv = nn.Linear(d_model, 2 * d_model, bias=bias)
        self.out = nn.Linear(d_model, d_model, bias=bias)
        self.score_v = (
            nn.Parameter(torch.randn(n_heads, self.head_dim) * self.head_dim**-0.5)
            if attn_score == "additive"
            else None
        )
        # None when off, so that the default model has exactly the reference's parameters.
        self.q_norm = HeadRMSNorm(self.head_dim, eps=QK_NORM_EPS) if qk_norm else None
        self.k_norm = HeadRMSNorm(self.head_dim, eps=QK_NORM_EPS) if qk_norm else None
        self.rotary = RotaryEmbedding(self.head_dim, rope_base) if positions == "rope" else None
        self.register_buffer("alibi", alibi_slopes(n_heads) if positions == "alibi" else None, persistent=False)
        self.record_weights = False
        self.last_weights: torch.Tensor | None = None
        self.last_logits: torch.Tensor | None = None

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        b, n, _ = t.shape
        return t.view(b, n, self.n_heads, self.head_dim).transpose(1, 2)

    def _project(self, x, context, cache: LayerCache | None, n_queries: int | None):
        if self.qk_proj != "separate":
            return self._project_switched(x, context, cache, n_queries)
        if not self.cross and n_queries is not None:
            # Queries from the first positions only, keys and values from all: the fused matrix's row blocks.
            d, weight, bias = self.d_model, self.qkv.weight, self.qkv.bias
            q = F.linear(x[:, :n_queries], weight[:d], None if bias is None else bias[:d])
            k, v = F.linear(x, weight[d:], None if bias is None else bias[d:]).split(d, dim=2)
            return self._rotate(self._heads(q), self._heads(k), self._heads(v), 0, cache)
        if not self.cross:
            q, k, v = self.qkv(x).split(self.d_model, dim=2)
            past = 0 if cache is None else cache.length
            return self._rotate(self._heads(q), self._heads(k), self._heads(v), past, cache)
        q = self._norm(self.q_norm, self._heads(self.q(x)))
        if cache is not None and cache.cross_k is not None:
            return q, cache.cross_k, cache.cross_v
        if context is None:
            raise ValueError("cross-attention needs a context (the encoder output)")
        k, v = self.kv(context).split(self.d_model, dim=2)
        k, v = self._norm(self.k_norm, self._heads(k)), self._heads(v)
        if cache is not None:
            cache.cross_k, cache.cross_v = k, v
        return q, k, v

    def _project_switched(self, x, context, cache, n_queries):
        """qk_proj "shared" / "none", for self- and cross-attention."""
        source = x if not self.cross else context
        if self.cross and source is None and (cache is None or cache.cross_k is None):
            raise ValueError("cross-attention needs a context (the encoder output)")
        xq = x if n_queries is None else x[:, :n_queries]
        shared = self.qv.weight[: self.d_model] if self.qk_proj == "shared" else None
        bias = None if self.qk_proj == "none" or self.qv.bias is None else self.qv.bias
        q = xq if shared is None else F.linear(xq, shared, None if bias is None else bias[: self.d_model])
        if self.cross and cache is not None and cache.cross_k is not None:
            return self._norm(self.q_norm, self._heads(q)), cache.cross_k, cache.cross_v
        if shared is None:
            k = v = source
        else:
            k = q if source is xq else F.linear(source, shared, None if bias is None else bias[: self.d_model])
            v = F.linear(source, self.qv.weight[self.d_model :], None if bias is None else bias[self.d_model :])
        q, k, v = self._heads(q), self._heads(k), self._heads(v)
        if self.cross:
            q, k = self._norm(self.q_norm, q), self._norm(self.k_norm, k)
            if cache is not None:
                cache.cross_k, cache.cross_v = k, v
            return q, k, v
        past = 0 if cache is None or n_queries is not None else cache.length
        return self._rotate(q, k, v, past, cache)

    @staticmethod
    def _norm(norm: HeadRMSNorm | None, t: torch.Tensor) -> torch.Tensor:
        return t if norm is None else norm(t)

    def _rotate(self, q, k, v, past: int, cache):
        """QK-norm, RoPE at absolute positions past.. (queries and the new keys), then the cache append."""
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.rotary is not None:
            q, k = self.rotary(q, past), self.rotary(k, past)
        if cache is not None:
            k, v = cache.append(k, v)
        return q, k, v

    def forward(
        self,
        x: torch.Tensor,
        context: torch.Tensor | None = None,
        *,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
        cache: LayerCache | None = None,
        n_queries: int | None = None,
    ) -> torch.Tensor:
        """x: (B, T, d_model); context: (B, S, d_model) for cross-attention.

        mask: boolean, broadcastable to (B, H, T, S), True = may attend; or None.
        is_causal: each query sees only keys at or before its own position (with a cache, the cached prefix
            counts as earlier positions). Ignored when `mask` is given: the mask must then carry causality
            (except with attn_window, see the class docstring).
        n_queries: self-attention outputs for the first `n_queries` positions only (B, n_queries, d_model), all
            positions still serving as keys and values (`mask` may cover all T queries or just those; causal
            queries see the positions up to their own, as in the full pass).
            Used where only those outputs are read (ViT's class token in the last block).
        """
        if n_queries is not None and (self.cross or cache is not None):
            raise ValueError("n_queries is for self-attention without a KV cache")
        q, k, v = self._project(x, context, cache, n_queries)
        if n_queries is not None and mask is not None and mask.dim() >= 2 and mask.shape[-2] > n_queries:
            mask = mask[..., :n_queries, :]
        t, s = q.shape[2], k.shape[2]
        q_start = 0 if n_queries is not None or self.cross else s - t  # absolute position of the first query
        dropout = self.dropout if self.training else 0.0
        if self.window is not None and not window_covers(self.window, s, is_causal):
            y, logits, weights = windowed_attention(
                q,
                k,
                v,
                self._logits,
                window=self.window,
                causal=is_causal,
                q_start=q_start,
                mask=mask,
                dropout=dropout,
                record=self.record_weights,
            )
            if self.record_weights:
                self.last_logits, self.last_weights = logits, weights
            return self.out(y.transpose(1, 2).reshape(x.shape[0], t, self.d_model))
        if self.window is not None and is_causal and mask is not None and mask.shape[-2] == 1:
            mask = build_attention_mask(mask[:, 0, 0, :], t, s, causal=True)  # a key mask, made causal
        if mask is None and is_causal and s != t and n_queries is None:
            # Queries continue a cached prefix: SDPA's is_causal aligns top-left, so spell the mask out
            # (None for a single new query, which may see everything before it).
            mask = build_attention_mask(None, t, s, causal=True)
            mask = None if mask is None else mask.to(q.device)
            is_causal = False
        elif mask is not None:
            is_causal = False
        if self._use_explicit(x):
            y = self._explicit(q, k, v, mask, is_causal, dropout, q_start)
        else:
            if self.alibi is not None:  # exact on SDPA as a float mask: bias, -inf where not allowed
                mask, is_causal = self._alibi_mask(mask, is_causal, q_start, t, s, q.device, q.dtype), False
            y = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=is_causal, scale=self.sdpa_scale
            )
        b = x.shape[0]
        return self.out(y.transpose(1, 2).reshape(b, t, self.d_model))

    def _use_explicit(self, x: torch.Tensor) -> bool:
        if self.impl == "explicit" or self.record_weights or self.attn_score != "dot":
            return True
        if self.impl == "sdpa":
            return False
        return x.device.type == "cpu" and torch.is_autocast_enabled("cpu") and torch.is_grad_enabled()

    def _logits(self, q: torch.Tensor, k: torch.Tensor, q_start: int, k_start: int) -> torch.Tensor:
        """Pre-softmax logits (B, H, tq, tk): score * scale (+ the ALiBi bias)."""
        if self.score_v is None:
            scores = q @ k.transpose(-2, -1)
        else:  # v_h^T tanh(q_i + k_j): a (tq, tk, head_dim) tensor per head, contracted with v_h
            scores = torch.einsum("bhtsd,hd->bhts", torch.tanh(q.unsqueeze(3) + k.unsqueeze(2)), self.score_v)
        if self.scale is not None:
            scores = scores * self.scale
        if self.alibi is not None:
            scores = scores + alibi_bias(self.alibi, q_start, q.shape[2], k_start, k.shape[2], q.device).to(
                scores.dtype
            )
        return scores

    def _dot_scores(self, q: torch.Tensor, k: torch.Tensor, is_causal: bool) -> torch.Tensor:
        """The logits of `_logits` for dot scores without a position bias, -inf above the diagonal when causal,
        from one baddbmm: the GEMM applies the scale and adds the causal mask as a 0 / -inf bias while it writes
        its output, where the written-out form reads and writes the (B, H, T, S) scores twice more (multiply,
        masked_fill) in the forward and again in the backward. Same values: the bias adds exactly 0 where a key
        is visible."""
        b, h, t, d = q.shape
        s = k.shape[2]
        if is_causal:
            bias = torch.full((t, s), float("-inf"), dtype=q.dtype, device=q.device).triu_(1)
        else:  # beta=0: the GEMM ignores the input (any tensor that broadcasts)
            bias = q.new_zeros(())
        scores = torch.baddbmm(
            bias,
            q.reshape(b * h, t, d),
            k.reshape(b * h, s, d).transpose(1, 2),
            beta=1.0 if is_causal else 0.0,
            alpha=1.0 if self.scale is None else self.scale,
        )
        return scores.view(b, h, t, s)

    def _alibi_mask(self, mask, is_causal, q_start, t, s, device, dtype) -> torch.Tensor:
        bias = alibi_bias(self.alibi, q_start, t, 0, s, device)[None]
        if is_causal:
            mask = torch.ones(t, s, dtype=torch.bool, device=device).tril()
        return (bias if mask is None else bias.masked_fill(~mask, float("-inf"))).to(dtype)

    def _explicit(self, q, k, v, mask, is_causal, dropout, q_start: int = 0):
        if mask is None and self.score_v is None and self.alibi is None:
            scores = self._dot_scores(q, k, is_causal)
        else:
            scores = self._logits(q, k, q_start, 0)
            if is_causal:
                mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).tril()
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))
        weights = scores.softmax(dim=-1)
        if self.record_weights:
            self.last_logits, self.last_weights = scores.detach(), weights.detach()
        if dropout:
            weights = F.dropout(weights, p=dropout)
        return weights.to(v.dtype) @ v
