"""Fold inference-mode BatchNorms into the linear layer next to them (BN-ViT's inference speed-up).

In eval mode a BatchNorm is a fixed per-feature affine map, y = s * x + t with s = gamma / sqrt(var + eps) and
t = beta - mean * s (running statistics). A linear layer right after it absorbs it, W (s * x + t) + c =
(W diag(s)) x + (W t + c), and one right before it too, s * (W x + c) + t = (diag(s) W) x + (s * c + t): the
BatchNorm then costs nothing at inference. LayerNorm has per-token statistics and cannot be folded.

What `fold_batchnorms` folds, block by block (`zoo.core.Block`):
- pre-LN blocks: norm1 into the self-attention's input projection (qkv, or qv for shared Q/K), norm_cross into
  the cross-attention's query projection, norm2 into the FFN's first layer. Post-LN norms also feed the skip
  path, so they stay (as do norms in front of qk_proj="none", which has no projection).
- the FFN's inner norm (fc1 -> norm -> activation -> fc2) into fc1, the linear layer *before* it: the activation
  between the norm and fc2 stops it from moving forward.
- a ViT's final norm into its head (the head reads the normalized pooled vector; `pre_logits` features of the
  folded model are therefore the unnormalized ones).
Masked BatchNorm zeroes the padded positions' outputs; folded, those rows carry other values, which real tokens
never read (they are masked keys), so the real tokens' outputs are unchanged.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from .block import Block


def _affine(bn: nn.BatchNorm1d) -> tuple[torch.Tensor, torch.Tensor]:
    """The (scale, shift) of a BatchNorm in eval mode, in float64 so that the fold adds no rounding of its own."""
    if bn.running_mean is None or bn.running_var is None:
        raise ValueError("a BatchNorm built with track_running_stats=False has no inference form to fold")
    scale = 1.0 / torch.sqrt(bn.running_var.double() + bn.eps)
    if bn.weight is not None:
        scale = scale * bn.weight.double()
    shift = -bn.running_mean.double() * scale
    if bn.bias is not None:
        shift = shift + bn.bias.double()
    return scale, shift


def _set(linear: nn.Linear, weight: torch.Tensor, bias: torch.Tensor) -> None:
    dtype = linear.weight.dtype
    linear.weight = nn.Parameter(weight.to(dtype), requires_grad=linear.weight.requires_grad)
    linear.bias = nn.Parameter(bias.to(dtype), requires_grad=linear.weight.requires_grad)


def fold_into_next(bn: nn.BatchNorm1d, linear: nn.Linear) -> None:
    """linear(bn(x)) == linear'(x) afterwards (in eval mode)."""
    scale, shift = _affine(bn)
    weight = linear.weight.double()
    bias = weight @ shift
    if linear.bias is not None:
        bias = bias + linear.bias.double()
    _set(linear, weight * scale[None, :], bias)


def fold_into_previous(linear: nn.Linear, bn: nn.BatchNorm1d) -> None:
    """bn(linear(x)) == linear'(x) afterwards (in eval mode)."""
    scale, shift = _affine(bn)
    bias = shift if linear.bias is None else linear.bias.double() * scale + shift
    _set(linear, linear.weight.double() * scale[:, None], bias)


def _is_bn(module: nn.Module) -> bool:
    return isinstance(module, nn.modules.batchnorm._BatchNorm)


def _fold_block(block: Block) -> int:
    folded = 0
    if block.norm_first:
        attn = block.self_attn
        projection = getattr(attn, "qkv", None) or getattr(attn, "qv", None)  # None for qk_proj="none"
        if _is_bn(block.norm1) and projection is not None:
            fold_into_next(block.norm1, projection)
            block.norm1, folded = nn.Identity(), folded + 1
        # Cross-attention: only separate projections read the normed decoder states alone (shared ones also
        # project the encoder output with the same matrix).
        cross = block.cross_attn
        if cross is not None and _is_bn(block.norm_cross) and getattr(cross, "q", None) is not None:
            fold_into_next(block.norm_cross, cross.q)
            block.norm_cross, folded = nn.Identity(), folded + 1
        if _is_bn(block.norm2):
            fold_into_next(block.norm2, block.ff.fc1)
            block.norm2, folded = nn.Identity(), folded + 1
    if _is_bn(block.ff.inner_norm):
        fold_into_previous(block.ff.fc1, block.ff.inner_norm)
        block.ff.inner_norm, folded = nn.Identity(), folded + 1
    return folded


@torch.no_grad()
def fold_batchnorms(model: nn.Module) -> nn.Module:
    """A copy of `model` in eval mode with every foldable BatchNorm merged into its neighbouring linear layer and
    replaced by an identity (see the module docstring); same logits as `model.eval()`. The original is untouched.
    The copy is for inference: its config still names the norms, so do not train or save it."""
    folded = copy.deepcopy(model).eval()
    count = sum(_fold_block(m) for m in folded.modules() if isinstance(m, Block))
    norm, head = getattr(folded, "norm", None), getattr(folded, "head", None)
    if norm is not None and _is_bn(norm) and isinstance(head, nn.Linear):
        fold_into_next(norm, head)
        folded.norm, count = nn.Identity(), count + 1
    folded.folded_batchnorms = count  # how many were merged: 0 means nothing changed
    return folded
