"""Windowed (local) attention computed block by block, so the scores cost O(n * w) memory instead of O(n^2).

The window, for a query at absolute position i:
- causal: the w most recent keys, i - w + 1 .. i (itself included), as in Longformer's / Mistral's sliding window;
- bidirectional: the keys within w // 2 on each side, i - w // 2 .. i + w // 2.
Queries are processed in blocks; a block only ever sees the band of keys that any of its queries may attend to
(at most block + w keys), so no (n, n) score matrix or mask is built. Under autograd each block's probabilities
are kept for the backward pass, so training memory is O(n * (block + w)) too.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

# logits(q_block, k_band, q_start, k_start) -> (B, H, tq, tk) pre-softmax logits (scale and position bias included).
Logits = Callable[[torch.Tensor, torch.Tensor, int, int], torch.Tensor]


def check_window(attn_window) -> None:
    if attn_window is not None and (
        isinstance(attn_window, bool) or not isinstance(attn_window, int) or attn_window <= 0
    ):
        raise ValueError(f"attn_window must be None (full attention) or a positive int, got {attn_window!r}")


def window_covers(window: int, n_keys: int, causal: bool) -> bool:
    """True when the window hides nothing: every query of a length-`n_keys` sequence would see every allowed key
    (causal: w >= n; bidirectional: w // 2 >= n - 1)."""
    return window >= n_keys if causal else window // 2 >= n_keys - 1


def _band(window: int, causal: bool, q_lo: int, q_hi: int, n_keys: int) -> tuple[int, int]:
    """The key range [lo, hi) that queries q_lo .. q_hi - 1 (absolute positions) may attend to."""
    if causal:
        return max(0, q_lo - window + 1), min(n_keys, q_hi)
    half = window // 2
    return max(0, q_lo - half), min(n_keys, q_hi + half)


def windowed_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    logits: Logits,
    *,
    window: int,
    causal: bool,
    q_start: int,
    mask: torch.Tensor | None = None,
    dropout: float = 0.0,
    block_size: int | None = None,
    record: bool = False,
):
    """q: (B, H, T, d) at absolute positions q_start .. q_start + T - 1; k, v: (B, H, S, d) at 0 .. S - 1.

    mask: boolean, True = may attend, broadcastable to (B, H, T, S): a key padding mask (B, 1, 1, S) keeps the
    whole computation O(n * w); a full (.., T, S) mask is sliced per block. Causality comes from `causal`, not
    from the mask. Where a mask is given each query may always attend to itself, so a padding query whose band
    holds only padding keeps a finite softmax (the rule of `masks.build_attention_mask`).
    Returns (output (B, H, T, d), logits, weights); the last two are dense (B, H, T, S) tensors (-inf / 0
    outside the window) only when `record`, else None.
    """
    b, h, t, _ = q.shape
    s = k.shape[2]
    block = block_size or max(window, 64)
    outputs = []
    all_logits = q.new_full((b, h, t, s), float("-inf"), dtype=torch.float32) if record else None
    all_weights = q.new_zeros((b, h, t, s), dtype=torch.float32) if record else None
    for lo in range(0, t, block):
        hi = min(t, lo + block)
        k_lo, k_hi = _band(window, causal, q_start + lo, q_start + hi, s)
        qi = torch.arange(q_start + lo, q_start + hi, device=q.device)[:, None]
        kj = torch.arange(k_lo, k_hi, device=q.device)[None, :]
        allowed = (qi - kj < window) & (qi >= kj) if causal else (qi - kj).abs() <= window // 2
        if mask is not None:
            rows = mask if mask.shape[-2] == 1 else mask[..., lo:hi, :]
            allowed = (allowed & rows[..., k_lo:k_hi]) | (qi == kj)
        scores = logits(q[:, :, lo:hi], k[:, :, k_lo:k_hi], q_start + lo, k_lo)
        scores = scores.masked_fill(~allowed, float("-inf"))
        weights = scores.softmax(dim=-1)
        if record:
            all_logits[:, :, lo:hi, k_lo:k_hi] = scores.detach().float()
            all_weights[:, :, lo:hi, k_lo:k_hi] = weights.detach().float()
        if dropout:
            weights = F.dropout(weights, p=dropout)
        outputs.append(weights.to(v.dtype) @ v[:, :, k_lo:k_hi])
    return torch.cat(outputs, dim=2), all_logits, all_weights
