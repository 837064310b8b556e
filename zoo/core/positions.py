"""Position information: which kind a model uses, how it enters the network, and the attention-side variants.

Two families:
- Input positions, added to (or concatenated with) the token embeddings before the first block: a learned table
  (GPT-2, BERT, ViT) or the fixed sinusoids of "Attention Is All You Need". They live in `embeddings.py`; this
  module chooses and merges them (`make_position_embedding`, `PositionConcat`).
- Relative positions inside self-attention, nothing added to the input: RoPE (Su et al. 2021, "RoFormer") rotates
  each (even, odd) pair of query/key channels by an angle proportional to the position, so q_i . k_j depends on
  i - j only; ALiBi (Press et al. 2022, "Train Short, Test Long") adds -slope_h * |i - j| to the logits of head h.
  Both depend on distances only, so they extrapolate past the training length and are unchanged by left padding
  (the real tokens keep their distances).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .embeddings import LearnedPositionEmbedding, SinusoidalPositionEmbedding

POSITIONS = ("learned", "sinusoidal", "none", "rope", "alibi")
INPUT_POSITIONS = ("learned", "sinusoidal")  # the kinds that are added to / concatenated with the input
ATTENTION_POSITIONS = ("rope", "alibi")  # the kinds applied inside self-attention
POSITION_MERGES = ("add", "concat")


def check_positions(positions: str, position_merge: str = "add", sinusoid_base: float = 10000.0) -> None:
    """One-line errors for unknown or inconsistent position options (the names are the models' config fields)."""
    if positions not in POSITIONS:
        raise ValueError(f"unknown positions '{positions}'; choose one of: {', '.join(POSITIONS)}")
    if position_merge not in POSITION_MERGES:
        raise ValueError(f"unknown position_merge '{position_merge}'; choose one of: {', '.join(POSITION_MERGES)}")
    if position_merge == "concat" and positions not in INPUT_POSITIONS:
        raise ValueError(
            f"position_merge='concat' needs positions learned or sinusoidal, got positions='{positions}'; "
            "use position_merge='add' (rope/alibi/none add nothing to the input)"
        )
    if isinstance(sinusoid_base, bool) or not isinstance(sinusoid_base, (int, float)) or not sinusoid_base > 1:
        raise ValueError(f"sinusoid_base must be a number > 1 (10000 in the papers), got {sinusoid_base!r}")


def make_position_embedding(positions: str, max_len: int, d_model: int, *, base: float = 10000.0) -> nn.Module | None:
    """The input-position module of a model, or None for rope/alibi/none.

    A learned table has `max_len` rows and rejects later positions; sinusoids are computed for any position
    (the table grows on demand), which is what lets such a model run past its training length."""
    if positions == "learned":
        return LearnedPositionEmbedding(max_len, d_model)
    if positions == "sinusoidal":
        return SinusoidalPositionEmbedding(max_len, d_model, base=base, bounded=False)
    return None


class PositionConcat(nn.Module):
    """position_merge="concat": x = W [token ; position], W of shape (d_model, 2 * d_model), no bias.

    The token and the position vectors keep the full width d_model each (so a tied output matrix still fits the
    token embedding); their concatenation is 2 * d_model wide and W projects it back to d_model for the blocks.
    Note W [t ; p] = W_t t + W_p p: concatenation is addition after a learned linear map of each part, which is
    exactly the argument the notes make for why adding loses nothing."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.proj = nn.Linear(2 * d_model, d_model, bias=False)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return self.proj(torch.cat([tokens, positions.expand_as(tokens)], dim=-1))


def merge_positions(tokens: torch.Tensor, positions: torch.Tensor | None, concat: PositionConcat | None):
    """tokens + positions (the reference order of the sum), W [tokens ; positions], or tokens alone."""
    if positions is None:
        return tokens
    return tokens + positions if concat is None else concat(tokens, positions)


# ---- RoPE -------------------------------------------------------------------------------------------------------


class RotaryEmbedding(nn.Module):
    """Rotate channel pairs (2i, 2i+1) of each head by the angle p * base^(-2i / head_dim) (RoFormer eq. 34).

    Applied to queries and to keys before they enter the KV cache, so the cache holds rotated keys and a new
    query only needs its own absolute position (= the cached length)."""

    def __init__(self, head_dim: int, base: float = 10000.0) -> None:
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"positions='rope' needs an even head dimension, got d_model / n_heads = {head_dim}")
        inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x: torch.Tensor, start: int) -> torch.Tensor:
        """x: (B, H, T, head_dim) at absolute positions start .. start + T - 1."""
        pos = torch.arange(start, start + x.shape[2], device=x.device, dtype=torch.float32)
        angle = pos[:, None] * self.inv_freq.to(x.device)  # (T, head_dim / 2)
        # Each pair (2i, 2i+1) as one complex number times e^(i angle): one elementwise kernel forward and one
        # backward, where the cos/sin form on strided halves takes a dozen (twice the time of a small model's
        # rotation). Computed in float32 (complex32 is not a CPU type), returned in x's dtype.
        pairs = x.float().unflatten(-1, (-1, 2))
        if pairs.stride(-1) != 1 or any(stride % 2 for stride in pairs.stride()[:-1]):
            pairs = pairs.contiguous()  # view_as_complex needs the pair adjacent and the rest of even stride
        rotated = torch.view_as_complex(pairs) * torch.polar(torch.ones_like(angle), angle)
        return torch.view_as_real(rotated).flatten(-2).to(x.dtype)


# ---- ALiBi ------------------------------------------------------------------------------------------------------


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """Press et al.'s head slopes: for n a power of two, the geometric sequence 2^(-8/n), 2^(-16/n), ..., 2^(-8);
    otherwise the slopes of the largest power of two m < n, then every other slope of 2m for the n - m others."""

    def geometric(n: int) -> list[float]:
        return [2.0 ** (-8.0 * (i + 1) / n) for i in range(n)]

    m = 2 ** math.floor(math.log2(n_heads))
    slopes = geometric(m) + geometric(2 * m)[0::2][: n_heads - m]
    return torch.tensor(slopes, dtype=torch.float32)


def alibi_bias(slopes: torch.Tensor, q_start: int, n_q: int, k_start: int, n_k: int, device) -> torch.Tensor:
    """(H, n_q, n_k) bias -slope_h * |i - j| for queries at q_start.. and keys at k_start.. (absolute positions).

    Symmetric in i - j: under causality the future half is masked anyway, and a bidirectional encoder gets the
    symmetric form used for ALiBi encoders."""
    qi = torch.arange(q_start, q_start + n_q, device=device)
    kj = torch.arange(k_start, k_start + n_k, device=device)
    distance = (qi[:, None] - kj[None, :]).abs().to(torch.float32)
    return -slopes.to(device)[:, None, None] * distance
