"""The layers every exported zoo model is built from, for `transformers` with trust_remote_code=True.

Written by transformer-zoo's exporter next to config.json. It imports only torch: the reader needs no zoo. The
module and parameter names are zoo's (zoo/core), so zoo's state dict loads as it is. The lab's switches are all
here; attention always takes the written-out path (softmax of the masked logits), which is exact for every
switch, and positions are computed in forward, not kept in buffers (transformers builds models on the meta
device, where a buffer computed in __init__ would be lost)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

QK_NORM_EPS = 1e-6  # zoo.core.attention.QK_NORM_EPS


class SquaredReLU(nn.Module):
    def forward(self, x):
        return torch.relu(x).square()


ACTIVATIONS = {
    "relu": nn.ReLU,
    "gelu": nn.GELU,
    "gelu_tanh": lambda: nn.GELU(approximate="tanh"),
    "relu2": SquaredReLU,
}


# ---- norms: the names and state-dict keys of zoo.core.norms ---------------------------------------------------
class TokenBatchNorm(nn.BatchNorm1d):
    """BatchNorm over the features of (B, T, D) tokens; `keep` (B, T) marks the real tokens for the masked kind,
    whose padded positions come out as zeros."""

    def __init__(self, dim, eps, masked=False):
        super().__init__(dim, eps=eps)
        self.masked = masked

    def forward(self, x, keep=None):
        if x.dim() == 2:
            return super().forward(x)
        if self.masked and keep is not None:
            out = x.new_zeros(x.shape)
            out[keep] = super().forward(x[keep])
            return out
        return super().forward(x.transpose(1, 2)).transpose(1, 2)


class Identity(nn.Module):
    def forward(self, x, keep=None):
        return x


class LayerNorm(nn.LayerNorm):
    def forward(self, x, keep=None):
        return super().forward(x)


def make_norm(kind, dim, eps, bias=True):
    if kind == "layernorm":
        return LayerNorm(dim, eps=eps, bias=bias)
    if kind in ("batchnorm", "batchnorm_masked"):
        return TokenBatchNorm(dim, eps, masked=kind == "batchnorm_masked")
    if kind in (None, "none"):
        return Identity()
    raise ValueError(f"unknown norm {kind!r} in config.json; expected layernorm, batchnorm, batchnorm_masked or none")


# ---- positions ------------------------------------------------------------------------------------------------
def sinusoids(positions, dim, base):
    """zoo.core.embeddings.sinusoid_table's rows at `positions` (any shape): sin on even, cos on odd channels."""
    inv_freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(base) / dim))
    angle = positions.to(torch.float32)[..., None] * inv_freq.to(positions.device)
    out = torch.zeros(*positions.shape, dim, device=positions.device)
    out[..., 0::2], out[..., 1::2] = torch.sin(angle), torch.cos(angle)
    return out


def rotate(x, start, base):
    """RoPE: channel pairs (2i, 2i+1) of x (B, H, T, d) rotated by p * base^(-2i/d) at positions start.."""
    d = x.shape[-1]
    inv_freq = base ** (-torch.arange(0, d, 2, dtype=torch.float32, device=x.device) / d)
    angle = torch.arange(start, start + x.shape[2], device=x.device, dtype=torch.float32)[:, None] * inv_freq
    pairs = torch.view_as_complex(x.float().unflatten(-1, (-1, 2)).contiguous())
    return torch.view_as_real(pairs * torch.polar(torch.ones_like(angle), angle)).flatten(-2).to(x.dtype)


def alibi_slopes(n_heads):
    def geometric(n):
        return [2.0 ** (-8.0 * (i + 1) / n) for i in range(n)]

    m = 2 ** math.floor(math.log2(n_heads))
    return torch.tensor(geometric(m) + geometric(2 * m)[0::2][: n_heads - m])


# ---- attention ------------------------------------------------------------------------------------------------
def allowed_keys(t, s, *, causal, window, keep, device):
    """The (B or 1, 1, t, s) boolean mask of zoo's attention for queries at s - t .. s - 1: causality, the local
    window, the key padding mask `keep` (B, s). Where a padding mask meets causality or a window, each query may
    see itself, so that its softmax stays finite (zoo.core.masks, zoo.core.window)."""
    qi = torch.arange(s - t, s, device=device)[:, None]
    kj = torch.arange(s, device=device)[None, :]
    allowed = torch.ones(t, s, dtype=torch.bool, device=device)
    if causal:
        allowed &= qi >= kj
    hides = window is not None and not (window >= s if causal else window // 2 >= s - 1)
    if hides:
        allowed &= (qi - kj < window) if causal else (qi - kj).abs() <= window // 2
    allowed = allowed[None, None]
    if keep is not None:
        allowed = allowed & keep.to(torch.bool)[:, None, None, :]
        if causal or hides:
            allowed = allowed | (qi == kj)
    return allowed


class MultiHeadAttention(nn.Module):
    """zoo.core.MultiHeadAttention: fused `qkv` (or `qv` for qk_proj=shared, none for qk_proj=none), `out`,
    `score_v` for additive scores, `q_norm` / `k_norm` for QK-norm; cross-attention has `q` and `kv`."""

    def __init__(
        self,
        d,
        heads,
        *,
        bias,
        cross=False,
        attn_scale="sqrt_dk",
        attn_score="dot",
        qk_proj="separate",
        positions=None,
        rope_base=10000.0,
        attn_window=None,
        qk_norm=False,
    ):
        super().__init__()
        self.d, self.heads, self.head_dim, self.cross = d, heads, d // heads, cross
        self.qk_proj, self.positions, self.rope_base, self.window = qk_proj, positions, rope_base, attn_window
        self.scale = {"sqrt_dk": 1.0 / math.sqrt(self.head_dim), "none": None}.get(attn_scale, attn_scale)
        if qk_proj == "separate" and cross:
            self.q, self.kv = nn.Linear(d, d, bias=bias), nn.Linear(d, 2 * d, bias=bias)
        elif qk_proj == "separate":
            self.qkv = nn.Linear(d, 3 * d, bias=bias)
        elif qk_proj == "shared":
            self.qv = nn.Linear(d, 2 * d, bias=bias)
        self.out = nn.Linear(d, d, bias=bias)
        self.score_v = nn.Parameter(torch.zeros(heads, self.head_dim)) if attn_score == "additive" else None
        self.q_norm = nn.RMSNorm(self.head_dim, eps=QK_NORM_EPS) if qk_norm else None
        self.k_norm = nn.RMSNorm(self.head_dim, eps=QK_NORM_EPS) if qk_norm else None

    def _heads(self, t):
        return t.view(t.shape[0], t.shape[1], self.heads, self.head_dim).transpose(1, 2)

    def _project(self, x, context):
        d = self.d
        if self.qk_proj == "separate" and not self.cross:
            return self.qkv(x).split(d, dim=2)
        if self.qk_proj == "separate":
            return (self.q(x), *self.kv(context).split(d, dim=2))
        source = context if self.cross else x
        if self.qk_proj == "none":
            return x, source, source
        w, b = self.qv.weight, self.qv.bias
        q = F.linear(x, w[:d], None if b is None else b[:d])
        k = F.linear(source, w[:d], None if b is None else b[:d])
        return q, k, F.linear(source, w[d:], None if b is None else b[d:])

    def forward(self, x, context=None, *, causal=False, keep=None):
        q, k, v = (self._heads(t) for t in self._project(x, context))
        if self.q_norm is not None:  # in float32, as zoo's HeadRMSNorm
            q = F.rms_norm(q.float(), (self.head_dim,), self.q_norm.weight, QK_NORM_EPS).to(q.dtype)
            k = F.rms_norm(k.float(), (self.head_dim,), self.k_norm.weight, QK_NORM_EPS).to(k.dtype)
        if self.positions == "rope":
            q, k = rotate(q, 0, self.rope_base), rotate(k, 0, self.rope_base)
        if self.score_v is None:
            logits = q @ k.transpose(-2, -1)
        else:  # Bahdanau's v_h^T tanh(q_i + k_j)
            logits = torch.einsum("bhtsd,hd->bhts", torch.tanh(q.unsqueeze(3) + k.unsqueeze(2)), self.score_v)
        if self.scale is not None:
            logits = logits * self.scale
        t, s = q.shape[2], k.shape[2]
        if self.positions == "alibi":
            distance = (torch.arange(t, device=x.device)[:, None] - torch.arange(s, device=x.device)).abs()
            logits = logits - alibi_slopes(self.heads).to(x.device)[:, None, None] * distance.float()
        if self.cross:
            mask = None if keep is None else keep.to(torch.bool)[:, None, None, :]
        else:
            mask = allowed_keys(t, s, causal=causal, window=self.window, keep=keep, device=x.device)
        if mask is not None:
            logits = logits.masked_fill(~mask, float("-inf"))
        y = logits.softmax(dim=-1).to(v.dtype) @ v
        return self.out(y.transpose(1, 2).reshape(x.shape[0], t, self.d))


# ---- feed-forward, block, stack -------------------------------------------------------------------------------
class FeedForward(nn.Module):
    def __init__(self, d, d_ff, *, activation, bias, inner_norm, eps):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {activation!r} in config.json; expected one of {list(ACTIVATIONS)}")
        self.fc1, self.act, self.fc2 = (
            nn.Linear(d, d_ff, bias=bias),
            ACTIVATIONS[activation](),
            nn.Linear(d_ff, d, bias=bias),
        )
        self.inner_norm = make_norm(inner_norm, d_ff, eps)

    def forward(self, x, keep=None):
        return self.fc2(self.act(self.inner_norm(self.fc1(x), keep)))


class Block(nn.Module):
    """zoo.core.Block: pre-LN (x + f(norm(x))) or post-LN (norm(x + f(x))); a switched-off residual drops the
    skip path (x = f(norm(x)) / norm(f(x)))."""

    def __init__(self, c, *, norm_first, cross=False):
        super().__init__()
        d, heads = c.zoo_width, c.zoo_heads
        self.norm_first, self.residual_attn, self.residual_ff = norm_first, c.residual_attn, c.residual_ff
        attention = dict(
            bias=c.bias, attn_scale=c.attn_scale, attn_score=c.attn_score, qk_proj=c.qk_proj, qk_norm=c.qk_norm
        )
        positions = getattr(c, "positions", None)  # ViT has only its learned table
        self.self_attn = MultiHeadAttention(
            d,
            heads,
            positions=positions if positions in ("rope", "alibi") else None,
            rope_base=getattr(c, "sinusoid_base", 10000.0),
            attn_window=c.attn_window,
            **attention,
        )
        self.norm1 = make_norm(c.norm, d, c.zoo_eps, c.bias)
        self.cross_attn = MultiHeadAttention(d, heads, cross=True, **attention) if cross else None
        if cross:
            self.norm_cross = make_norm(c.norm, d, c.zoo_eps, c.bias)
        self.ff = FeedForward(
            d, c.zoo_ff, activation=c.activation, bias=c.bias, inner_norm=c.ff_inner_norm, eps=c.zoo_eps
        )
        self.norm2 = make_norm(c.norm, d, c.zoo_eps, c.bias)

    def forward(self, x, *, causal=False, keep=None, context=None, context_keep=None, norm_keep=None):
        """keep: (B, T) real tokens, the keys self-attention may see; norm_keep: the tokens masked batch norm
        counts (default `keep`; the Transformer's decoder counts non-pad tokens but masks no key)."""
        nk = keep if norm_keep is None else norm_keep

        def attend(h):
            return self.self_attn(h, causal=causal, keep=keep)

        def cross(h):
            return self.cross_attn(h, context, keep=context_keep)

        ra, rf = self.residual_attn, self.residual_ff
        if self.norm_first:
            x = attend(self.norm1(x, nk)) + (x if ra else 0)
            if self.cross_attn is not None:
                x = cross(self.norm_cross(x, nk)) + (x if ra else 0)
            return self.ff(self.norm2(x, nk), nk) + (x if rf else 0)
        x = self.norm1(attend(x) + (x if ra else 0), nk)
        if self.cross_attn is not None:
            x = self.norm_cross(cross(x) + (x if ra else 0), nk)
        return self.norm2(self.ff(x, nk) + (x if rf else 0), nk)


class BlockStack(nn.Module):
    def __init__(self, c, n_layers, *, norm_first, final_norm, cross=False):
        super().__init__()
        self.layers = nn.ModuleList(Block(c, norm_first=norm_first, cross=cross) for _ in range(n_layers))
        self.final_norm = make_norm(c.norm, c.zoo_width, c.zoo_eps, c.bias) if final_norm else None

    def forward(self, x, **kwargs):
        for layer in self.layers:
            x = layer(x, **kwargs)
        nk = kwargs.get("keep") if kwargs.get("norm_keep") is None else kwargs["norm_keep"]
        return x if self.final_norm is None else self.final_norm(x, nk)


def embed_with_positions(tokens, position_ids, c, pos_emb, pos_merge, max_len):
    """zoo's input positions (zoo.core.positions): a learned table (stops at `max_len`), sinusoids (any length; the
    token vectors are then scaled by sqrt(d) when added, as zoo and the 2017 paper do) or none (rope / alibi act in
    attention); added, or concatenated and projected (position_merge=concat)."""
    if c.positions == "learned":
        if position_ids.numel() and int(position_ids.max()) >= max_len:
            raise ValueError(
                f"position {int(position_ids.max())} is beyond the model's {max_len} learned positions; "
                "shorten the input"
            )
        pos = pos_emb(position_ids)
    elif c.positions == "sinusoidal":
        pos = sinusoids(position_ids, tokens.shape[-1], c.sinusoid_base)
        if pos_merge is None:
            tokens = tokens * tokens.shape[-1] ** 0.5
    else:
        return tokens
    return tokens + pos if pos_merge is None else pos_merge(tokens, pos)


class PositionConcat(nn.Module):
    """position_merge=concat: W [token ; position]."""

    def __init__(self, d):
        super().__init__()
        self.proj = nn.Linear(2 * d, d, bias=False)

    def forward(self, tokens, positions):
        return self.proj(torch.cat([tokens, positions.expand_as(tokens)], dim=-1))
