"""Statistics of one attention map of shape (B, H, T, S), averaged over batch, heads and query rows; masked keys
carry weight 0 (and logit -inf)."""

from __future__ import annotations

import torch


def entropy(weights: torch.Tensor) -> float:
    """Mean entropy (nats) of each query's distribution over keys: 0 = one key only, log(S) = uniform."""
    p = weights.double()
    terms = torch.where(p > 0, -p * p.log(), torch.zeros_like(p))
    return float(terms.sum(-1).mean())


def max_probability(weights: torch.Tensor) -> float:
    """Mean of each query's largest weight: near 1 when the softmax has saturated onto one key."""
    return float(weights.double().amax(-1).mean())


def diagonal_mass(weights: torch.Tensor) -> float | None:
    """Mean weight a query gives to its own position (the diagonal); None when queries and keys differ
    (cross-attention, a cached prefix), where "itself" is not defined. Queries align with the last T keys."""
    t, s = weights.shape[-2], weights.shape[-1]
    if t != s:
        return None
    return float(weights.double().diagonal(dim1=-2, dim2=-1).mean())


def logit_variance(logits: torch.Tensor) -> float:
    """Mean over query rows of the variance of the pre-softmax logits across the allowed keys: the spread that
    decides saturation (it grows like d_k without the 1/sqrt(d_k) scale)."""
    x = logits.double()
    allowed = torch.isfinite(x)
    n = allowed.sum(-1).clamp(min=1)
    x = torch.where(allowed, x, torch.zeros_like(x))
    mean = x.sum(-1) / n
    var = torch.where(allowed, (x - mean[..., None]) ** 2, torch.zeros_like(x)).sum(-1) / n
    return float(var.mean())


def summarize(weights: torch.Tensor, logits: torch.Tensor | None = None) -> dict[str, float]:
    """All statistics of one map, by name (diag_mass only where it is defined). Without recorded logits, the log of
    the weights stands for them (exact up to a per-row constant, but underflowed keys drop out)."""
    stats = {
        "entropy": entropy(weights),
        "max_prob": max_probability(weights),
        "logit_var": logit_variance(logits if logits is not None else weights.double().log()),
    }
    diag = diagonal_mass(weights)
    if diag is not None:
        stats["diag_mass"] = diag
    return stats
