"""Normalization layers over the feature dimension of (batch, tokens, features) activations.

The lab's `norm` switch: "layernorm" (per token), "batchnorm" (per feature, statistics over every position of the
batch, padding included: what a user would first write), "batchnorm_masked" (the same over real tokens only, so
that padding neither shifts the batch statistics nor the running ones) and "none" (identity).
"""

from __future__ import annotations

import torch
from torch import nn


class TokenBatchNorm(nn.BatchNorm1d):
    """BatchNorm over features, with statistics pooled over batch and tokens (the BN-ViT variant)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 2:
            return super().forward(x)
        return super().forward(x.transpose(1, 2)).transpose(1, 2)


class MaskedTokenBatchNorm(TokenBatchNorm):
    """TokenBatchNorm whose batch statistics (and running statistics) come from the real tokens only.

    token_mask: (B, T) bool, True at real tokens. The real tokens are gathered into one (N, D) batch and
    normalized by BatchNorm1d itself (so momentum, unbiased running variance and eval mode are torch's); the
    padded positions' outputs are zero, so that nothing computed from the padding's values reaches them either.
    Without a mask every position is real and this is TokenBatchNorm.
    """

    def forward(self, x: torch.Tensor, token_mask: torch.Tensor | None = None) -> torch.Tensor:
        if token_mask is None or x.dim() != 3:
            return super().forward(x)
        return over_real_tokens(lambda real: nn.BatchNorm1d.forward(self, real), x, token_mask)


def over_real_tokens(norm, x: torch.Tensor, token_mask: torch.Tensor) -> torch.Tensor:
    """`norm` applied to the real tokens of x (B, T, D) as one (N, D) batch; zeros at the padded positions."""
    keep = token_mask.to(device=x.device, dtype=torch.bool)
    if keep.shape != x.shape[:2]:
        raise ValueError(f"the token mask is {tuple(keep.shape)} but the activations are {tuple(x.shape[:2])}")
    out = x.new_zeros(x.shape)
    out[keep] = norm(x[keep])
    return out


NORMS = ("layernorm", "batchnorm", "batchnorm_masked", "none")
# Between the two layers of the feed-forward network: none by default (None), BN-ViT puts a BatchNorm there.
FF_INNER_NORMS = (None, "batchnorm", "batchnorm_masked", "layernorm")


def make_norm(kind: str, dim: int, *, eps: float = 1e-5, bias: bool = True) -> nn.Module:
    if kind == "layernorm":
        return nn.LayerNorm(dim, eps=eps, bias=bias)
    if kind == "batchnorm":
        return TokenBatchNorm(dim, eps=eps)
    if kind == "batchnorm_masked":
        return MaskedTokenBatchNorm(dim, eps=eps)
    if kind == "none":
        return nn.Identity()
    raise ValueError(f"unknown norm '{kind}'; choose one of {', '.join(NORMS)}")


def apply_norm(
    norm: nn.Module, x: torch.Tensor, token_mask: torch.Tensor | None, *, masked: bool = False
) -> torch.Tensor:
    """`norm(x)` for (B, T, D) activations, handing the (B, T) real-token mask to masked batch norm.

    masked: the caller built this norm as "batchnorm_masked". The caller says so because a trainer's
    `sync_batchnorm` (DDP) swaps every BatchNorm for torch's SyncBatchNorm, which knows neither the token layout
    (it normalizes dim 1) nor the mask: such a foreign BatchNorm gets the tokens as an (N, D) batch here, the
    real ones only when masked, so that both variants keep their meaning with synchronized statistics."""
    if isinstance(norm, MaskedTokenBatchNorm):
        return norm(x, token_mask)
    if not isinstance(norm, nn.modules.batchnorm._BatchNorm) or isinstance(norm, TokenBatchNorm) or x.dim() != 3:
        return norm(x)
    if masked and token_mask is not None:
        return over_real_tokens(norm, x, token_mask)
    return norm(x.reshape(-1, x.shape[-1])).reshape(x.shape)


def check_norm_options(norm: str, ff_inner_norm: str | None) -> None:
    """One-line errors naming the option and its allowed values."""
    if norm not in NORMS:
        raise ValueError(f"unknown norm {norm!r}; choose one of: {', '.join(NORMS)}")
    if ff_inner_norm not in FF_INNER_NORMS:
        raise ValueError(
            f"unknown ff_inner_norm {ff_inner_norm!r}; choose one of: null (no norm), "
            + ", ".join(k for k in FF_INNER_NORMS if k)
        )
