"""Input embeddings: tokens, learned and sinusoidal positions, segments (token types), image patches."""

from __future__ import annotations

import math

import torch
from torch import nn


def _cheap_to_check(t: torch.Tensor) -> bool:
    # Range checks read a value back from the tensor: free on CPU, a device sync on GPU and a graph break under
    # torch.compile, so they run only on eager CPU tensors (the GPU reports a bad index by itself).
    return t.device.type == "cpu" and t.numel() > 0 and not torch.compiler.is_compiling()


class TokenEmbedding(nn.Embedding):
    """Token lookup, optionally scaled by sqrt(d_model) (the 2017 Transformer); `logits` reuses the matrix as a
    tied output projection."""

    def __init__(self, vocab_size: int, d_model: int, *, scale: bool = False, padding_idx: int | None = None):
        if vocab_size <= 0:
            raise ValueError(f"vocab_size must be positive, got {vocab_size}")
        super().__init__(vocab_size, d_model, padding_idx=padding_idx)
        self.scale = math.sqrt(d_model) if scale else 1.0

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if _cheap_to_check(ids) and (int(ids.max()) >= self.num_embeddings or int(ids.min()) < 0):
            bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
            raise ValueError(
                f"token id {bad} is outside the vocabulary of {self.num_embeddings} tokens; "
                "the tokenizer and the model disagree about vocab_size"
            )
        x = super().forward(ids)
        return x * self.scale if self.scale != 1.0 else x

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden @ self.weight.t()


def _check_positions(positions: torch.Tensor, max_len: int) -> None:
    if _cheap_to_check(positions) and int(positions.min()) < 0:
        raise ValueError(f"position {int(positions.min())} is negative; positions count from 0")
    if _cheap_to_check(positions) and int(positions.max()) >= max_len:
        raise ValueError(
            f"position {int(positions.max())} is beyond the model's maximum context of {max_len} tokens; "
            "shorten the input or build the model with a longer context"
        )


class LearnedPositionEmbedding(nn.Embedding):
    """A trained vector per absolute position (GPT-2, BERT, ViT)."""

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        _check_positions(positions, self.num_embeddings)
        return super().forward(positions)


def sinusoid_table(n_positions: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """(n_positions, d_model): PE[p, 2i] = sin(p / base^(2i/d)), PE[p, 2i+1] = cos(p / base^(2i/d))."""
    position = torch.arange(n_positions, dtype=torch.float32)[:, None]
    inv_freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(base) / d_model))
    table = torch.zeros(n_positions, d_model)
    table[:, 0::2] = torch.sin(position * inv_freq)
    table[:, 1::2] = torch.cos(position * inv_freq)
    return table


class SinusoidalPositionEmbedding(nn.Module):
    """Fixed sin/cos encodings of "Attention Is All You Need" (`sinusoid_table`; base 10000 in the paper).

    bounded=True (the 2017 Transformer): positions >= max_len are an error, as for a learned table.
    bounded=False: any position works; the table is extended on demand (a row depends only on its position, so
    the extension equals a longer table built up front)."""

    def __init__(self, max_len: int, d_model: int, *, base: float = 10000.0, bounded: bool = True) -> None:
        super().__init__()
        if d_model % 2:
            raise ValueError(f"sinusoidal positions need an even d_model, got {d_model}")
        self.max_len, self.d_model, self.base, self.bounded = max_len, d_model, base, bounded
        self.register_buffer("table", sinusoid_table(max_len, d_model, base), persistent=False)

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        if self.bounded:
            _check_positions(positions, self.max_len)
        elif positions.numel() and int(positions.max()) >= self.table.shape[0]:
            longer = max(int(positions.max()) + 1, 2 * self.table.shape[0])
            self.table = sinusoid_table(longer, self.d_model, self.base).to(self.table.device)
        return self.table[positions]


class SegmentEmbedding(nn.Embedding):
    """Token-type embedding (BERT's sentence A / sentence B)."""

    def forward(self, segment_ids: torch.Tensor) -> torch.Tensor:
        if _cheap_to_check(segment_ids) and int(segment_ids.max()) >= self.num_embeddings:
            raise ValueError(
                f"segment id {int(segment_ids.max())} is out of range for {self.num_embeddings} segment types"
            )
        return super().forward(segment_ids)


class PatchEmbedding(nn.Module):
    """Split an image into non-overlapping patches and project each to d_model with one strided Conv2d."""

    def __init__(self, image_size: int, patch_size: int, in_channels: int, d_model: int, *, bias: bool = True):
        super().__init__()
        if image_size % patch_size:
            raise ValueError(f"image_size={image_size} is not divisible by patch_size={patch_size}")
        self.image_size, self.patch_size, self.in_channels = image_size, patch_size, in_channels
        self.grid = image_size // patch_size
        self.proj = nn.Conv2d(in_channels, d_model, kernel_size=patch_size, stride=patch_size, bias=bias)

    @property
    def num_patches(self) -> int:
        return self.grid * self.grid

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if images.dim() != 4 or images.shape[1] != self.in_channels:
            raise ValueError(f"expected images shaped (batch, {self.in_channels}, H, W), got {tuple(images.shape)}")
        h, w = images.shape[-2:]
        if h % self.patch_size or w % self.patch_size:
            raise ValueError(f"image size {h}x{w} is not divisible by the patch size {self.patch_size}")
        return self.proj(images).flatten(2).transpose(1, 2)  # (B, patches, d_model)
