"""The Transformer block (self-attention, optional cross-attention, feed-forward) and a stack of them."""

from __future__ import annotations

import contextlib
from functools import partial

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from .attention import MultiHeadAttention
from .feedforward import FeedForward
from .kv_cache import KVCache
from .norms import apply_norm, make_norm


class Block(nn.Module):
    """One layer. `norm_first=False` is post-LN (2017 paper, BERT): x = norm(x + sublayer(x)).
    `norm_first=True` is pre-LN (GPT-2, ViT): x = x + sublayer(norm(x)).

    The lab's block switches: `norm` (see `norms.NORMS`; "none" leaves x + sublayer(x)), `ff_inner_norm` (a norm
    between the feed-forward layers), and `residual_attn` / `residual_ff`: False drops exactly the skip path
    of that sub-layer (x = sublayer(norm(x)) pre-LN, x = norm(sublayer(x)) post-LN); cross-attention follows
    `residual_attn`."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        *,
        dropout: float = 0.0,
        attn_dropout: float = 0.0,
        ff_inner_dropout: float = 0.0,
        activation: str = "gelu",
        norm_first: bool = True,
        norm: str = "layernorm",
        ff_inner_norm: str | None = None,
        norm_eps: float = 1e-5,
        cross_attention: bool = False,
        bias: bool = True,
        attn_impl: str = "auto",
        attn_positions: str | None = None,
        rope_base: float = 10000.0,
        attn_window: int | None = None,
        residual_attn: bool = True,
        residual_ff: bool = True,
        **attention,
    ) -> None:
        """attn_positions ("rope", "alibi" or None), rope_base and attn_window: self-attention only. `attention`:
        the other keywords of `MultiHeadAttention` (the lab's attn_scale, attn_score, qk_proj, qk_norm...), for
        self- and cross-attention alike; a new attention switch passes through here unnamed."""
        super().__init__()
        self.norm_first = norm_first
        self.residual_attn, self.residual_ff = residual_attn, residual_ff
        self.masked_norm = norm == "batchnorm_masked"  # see norms.apply_norm
        self.self_attn = MultiHeadAttention(
            d_model,
            n_heads,
            dropout=attn_dropout,
            bias=bias,
            impl=attn_impl,
            positions=attn_positions,
            rope_base=rope_base,
            attn_window=attn_window,
            **attention,
        )
        self.norm1 = make_norm(norm, d_model, eps=norm_eps, bias=bias)
        self.cross_attn = None
        if cross_attention:
            self.cross_attn = MultiHeadAttention(
                d_model, n_heads, dropout=attn_dropout, bias=bias, cross=True, impl=attn_impl, **attention
            )
            self.norm_cross = make_norm(norm, d_model, eps=norm_eps, bias=bias)
        self.ff = FeedForward(
            d_model,
            d_ff,
            activation=activation,
            dropout=dropout,
            inner_dropout=ff_inner_dropout,
            bias=bias,
            inner_norm=ff_inner_norm,
            norm_eps=norm_eps,
        )
        self.norm2 = make_norm(norm, d_model, eps=norm_eps, bias=bias)
        self.dropout = nn.Dropout(dropout) if dropout else nn.Identity()

    def forward(
        self,
        x: torch.Tensor,
        *,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
        context: torch.Tensor | None = None,
        context_mask: torch.Tensor | None = None,
        cache=None,
        n_outputs: int | None = None,
        token_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """n_outputs: compute the first `n_outputs` positions only (the others still act as keys and values).
        With per-position norms that is exactly those rows of the full output; batch norm would see other
        statistics. token_mask: (B, T) bool, True at real tokens (not padding), for masked batch norm."""

        def self_attn(h):
            return self.dropout(self.self_attn(h, mask=mask, is_causal=is_causal, cache=cache, n_queries=n_outputs))

        residual = x if n_outputs is None else x[:, :n_outputs]
        full_mask = token_mask
        if token_mask is not None and n_outputs is not None:
            token_mask = token_mask[:, :n_outputs]

        def cross_attn(h):
            return self.dropout(self.cross_attn(h, context, mask=context_mask, cache=cache))

        def norm(module, h, keep=token_mask):
            return apply_norm(module, h, keep, masked=self.masked_norm)

        def add(skip, h, on: bool):
            # The skip path, or (switched off) the sub-layer's output alone.
            return skip + h if on else h

        ra, rf = self.residual_attn, self.residual_ff
        if self.norm_first:
            x = add(residual, self_attn(norm(self.norm1, x, full_mask)), ra)
            if self.cross_attn is not None:
                x = add(x, cross_attn(norm(self.norm_cross, x)), ra)
            return add(x, self.ff(norm(self.norm2, x), token_mask), rf)
        x = norm(self.norm1, add(residual, self_attn(x), ra))
        if self.cross_attn is not None:
            x = norm(self.norm_cross, add(x, cross_attn(x), ra))
        return norm(self.norm2, add(x, self.ff(x, token_mask), rf))


class BlockStack(nn.Module):
    """`n_layers` identical blocks, with an optional final norm (pre-LN stacks need one after the last block).

    activation_checkpointing: keep only each block's input while gradients are computed and run the block's forward
    again in the backward pass (torch's non-reentrant checkpoint, random state restored, so dropout draws the same
    masks): the same values and gradients for about one more forward pass of compute, and the activation memory of
    one block instead of all of them. Not with a KV cache (a second forward would append to it again)."""

    def __init__(
        self, n_layers: int, d_model: int, *, final_norm: bool, activation_checkpointing: bool = False, **block_kwargs
    ) -> None:
        super().__init__()
        if n_layers <= 0:
            raise ValueError(f"n_layers must be positive, got {n_layers}")
        self.activation_checkpointing = activation_checkpointing
        self.layers = nn.ModuleList(Block(d_model, **block_kwargs) for _ in range(n_layers))
        kind = block_kwargs.get("norm", "layernorm")
        self.masked_final_norm = kind == "batchnorm_masked"  # see norms.apply_norm
        self.final_norm = (
            make_norm(
                kind,
                d_model,
                eps=block_kwargs.get("norm_eps", 1e-5),
                bias=block_kwargs.get("bias", True),
            )
            if final_norm
            else None
        )

    def forward(
        self,
        x: torch.Tensor,
        *,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
        context: torch.Tensor | None = None,
        context_mask: torch.Tensor | None = None,
        cache: KVCache | None = None,
        n_outputs: int | None = None,
        token_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """n_outputs: return only the first `n_outputs` positions, and compute only those in the last layer
        (no earlier layer can skip any: every position is a key/value of the next layer).
        token_mask: (B, T) bool, True at real tokens: what masked batch norm computes its statistics over."""
        last = len(self.layers) - 1
        recompute = self.activation_checkpointing and cache is None and torch.is_grad_enabled()
        for i, layer in enumerate(self.layers):
            inputs = dict(
                mask=mask,
                is_causal=is_causal,
                context=context,
                context_mask=context_mask,
                cache=None if cache is None else cache.layers[i],
                n_outputs=n_outputs if i == last else None,
                token_mask=token_mask,
            )
            if recompute:
                context_fn = partial(_keep_running_stats, layer)
                x = checkpoint(layer, x, use_reentrant=False, context_fn=context_fn, **inputs)
            else:
                x = layer(x, **inputs)
        if self.final_norm is None:
            return x
        if token_mask is not None and n_outputs is not None:
            token_mask = token_mask[:, :n_outputs]
        return apply_norm(self.final_norm, x, token_mask, masked=self.masked_final_norm)


def _keep_running_stats(layer: nn.Module):
    """checkpoint's two contexts (first forward, recomputation): a block's BatchNorms in training mode update their
    running statistics on every forward, so the recomputation puts them back as the first forward left them."""
    norms = [m for m in layer.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats]
    return contextlib.nullcontext(), _restoring_buffers(norms)


@contextlib.contextmanager
def _restoring_buffers(modules: list[nn.Module]):
    saved = [[b.clone() for b in m.buffers()] for m in modules]
    try:
        yield
    finally:  # also when the recomputation stops early, once it has every tensor the backward needs
        with torch.no_grad():
            for m, buffers in zip(modules, saved):
                for b, value in zip(m.buffers(), buffers):
                    b.copy_(value)
