"""Normalization layers over the feature dimension of (batch, tokens, features) activations."""

from __future__ import annotations

import torch
from torch import nn


class TokenBatchNorm(nn.BatchNorm1d):
    """BatchNorm over features, with statistics pooled over batch and tokens (the BN-ViT variant)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 2:
            return super().forward(x)
        return super().forward(x.transpose(1, 2)).transpose(1, 2)


NORMS = ("layernorm", "batchnorm")


def make_norm(kind: str, dim: int, *, eps: float = 1e-5, bias: bool = True) -> nn.Module:
    if kind == "layernorm":
        return nn.LayerNorm(dim, eps=eps, bias=bias)
    if kind == "batchnorm":
        return TokenBatchNorm(dim, eps=eps)
    raise ValueError(f"unknown norm '{kind}'; choose one of {', '.join(NORMS)}")
