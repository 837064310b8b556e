"""Multi-head attention for self- and cross-attention, with an SDPA fast path and an explicit reference path."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .kv_cache import LayerCache
from .masks import build_attention_mask

# "sdpa": torch's fused scaled_dot_product_attention (flash / memory-efficient kernels on GPU).
# "explicit": softmax(Q K^T / sqrt(d_k)) V written out; it can return the attention weights.
# "auto": per device, dtype and mode. On CPU under bf16 autocast the backward of SDPA is slow (about 2x the
#   explicit path for ViT-sized problems), so auto takes the explicit path when training there; without
#   gradients (evaluation, generation) SDPA is the faster one (240 greedy tokens with the GPT benchmark
#   model under bf16 autocast: 870 ms explicit, 691 ms SDPA at batch 1), and auto takes SDPA everywhere else.
ATTENTION_IMPLS = ("auto", "sdpa", "explicit")


class MultiHeadAttention(nn.Module):
    """Multi-head attention.

    Self-attention projects Q, K and V with one fused matrix (`qkv`); cross-attention projects the queries
    from `x` (`q`) and keys/values from `context` with one fused matrix (`kv`). Masks are boolean with True
    meaning "may attend" (see `masks.build_attention_mask`).
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
        self.d_model, self.n_heads, self.head_dim = d_model, n_heads, d_model // n_heads
        self.cross, self.impl, self.dropout = cross, impl, dropout
        if cross:
            self.q = nn.Linear(d_model, d_model, bias=bias)
            self.kv = nn.Linear(d_model, 2 * d_model, bias=bias)
        else:
            self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out = nn.Linear(d_model, d_model, bias=bias)
        # When True, the explicit path keeps the last attention weights (B, H, T, S) for inspection/rollout.
        self.record_weights = False
        self.last_weights: torch.Tensor | None = None

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        b, n, _ = t.shape
        return t.view(b, n, self.n_heads, self.head_dim).transpose(1, 2)

    def _project(self, x, context, cache: LayerCache | None, n_queries: int | None):
        if not self.cross and n_queries is not None:
            # Queries from the first positions only, keys and values from all: the fused matrix's row blocks.
            d, weight, bias = self.d_model, self.qkv.weight, self.qkv.bias
            q = F.linear(x[:, :n_queries], weight[:d], None if bias is None else bias[:d])
            k, v = F.linear(x, weight[d:], None if bias is None else bias[d:]).split(d, dim=2)
            return self._heads(q), self._heads(k), self._heads(v)
        if not self.cross:
            q, k, v = self.qkv(x).split(self.d_model, dim=2)
            q, k, v = self._heads(q), self._heads(k), self._heads(v)
            if cache is not None:
                k, v = cache.append(k, v)
            return q, k, v
        q = self._heads(self.q(x))
        if cache is not None and cache.cross_k is not None:
            return q, cache.cross_k, cache.cross_v
        if context is None:
            raise ValueError("cross-attention needs a context (the encoder output)")
        k, v = self.kv(context).split(self.d_model, dim=2)
        k, v = self._heads(k), self._heads(v)
        if cache is not None:
            cache.cross_k, cache.cross_v = k, v
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
            counts as earlier positions). Ignored when `mask` is given: the mask must then carry causality.
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
        if mask is None and is_causal and s != t and n_queries is None:
            # Queries continue a cached prefix: SDPA's is_causal aligns top-left, so spell the mask out
            # (None for a single new query, which may see everything before it).
            mask = build_attention_mask(None, t, s, causal=True)
            mask = None if mask is None else mask.to(q.device)
            is_causal = False
        elif mask is not None:
            is_causal = False
        dropout = self.dropout if self.training else 0.0
        if self._use_explicit(x):
            y = self._explicit(q, k, v, mask, is_causal, dropout)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=is_causal)
        b = x.shape[0]
        return self.out(y.transpose(1, 2).reshape(b, t, self.d_model))

    def _use_explicit(self, x: torch.Tensor) -> bool:
        if self.impl == "explicit" or self.record_weights:
            return True
        if self.impl == "sdpa":
            return False
        return x.device.type == "cpu" and torch.is_autocast_enabled("cpu") and torch.is_grad_enabled()

    def _explicit(self, q, k, v, mask, is_causal, dropout):
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
        if is_causal:
            mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).tril()
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = scores.softmax(dim=-1)
        if self.record_weights:
            self.last_weights = weights.detach()
        if dropout:
            weights = F.dropout(weights, p=dropout)
        return weights.to(v.dtype) @ v
