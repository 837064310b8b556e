"""The batch dataclasses the DataModules serve (Lightning moves each tensor field to the device), and their padding.
Like the (inputs, targets) tuples of language-model windows and images, they unpack as `inputs, targets = batch`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

PAD_TO = ("max_length", "longest")


@dataclass
class EncoderBatch:
    """input_ids, token_type_ids, attention_mask: (B, T); attention_mask is 1 for real tokens, 0 for padding.
    labels: MLM targets (B, T) with -100 where nothing is predicted, or class labels (B,) for classification.
    nsp_labels: (B,) 0 = B follows A, 1 = B is random (pretraining only)."""

    input_ids: torch.Tensor
    token_type_ids: torch.Tensor
    attention_mask: torch.Tensor
    labels: torch.Tensor
    nsp_labels: torch.Tensor | None = None

    def __iter__(self):
        return iter((self.input_ids, self.labels))


@dataclass
class TranslationBatch:
    """src, src_mask: (B, S) source ids and 1 for real tokens; tgt_in: (B, T) BOS + target (decoder inputs);
    labels: (B, T) target + EOS, padded with the pad id (which the loss ignores).
    src_text, ref_text: the raw sentences (evaluation only: BLEU references and logged examples)."""

    src: torch.Tensor
    src_mask: torch.Tensor
    tgt_in: torch.Tensor
    labels: torch.Tensor
    src_text: list[str] | None = None
    ref_text: list[str] | None = None

    def __iter__(self):
        return iter((self.src, self.labels))


def pad_sequences(rows: list[list[int]], length: int, value: int) -> torch.Tensor:
    out = torch.full((len(rows), length), value, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.as_tensor(row, dtype=torch.long)
    return out


def pad_encoder_items(items: list[dict], pad_id: int, pad_to: str, block_size: int) -> tuple[torch.Tensor, ...]:
    """(input_ids, token_type_ids, attention_mask, padded length) of items with input_ids and token_type_ids, padded
    to block_size (pad_to="max_length": fixed shapes) or to the longest row ("longest": less compute)."""
    rows = [it["input_ids"] for it in items]
    length = block_size if pad_to == "max_length" else max(len(r) for r in rows)
    return (
        pad_sequences(rows, length, pad_id),
        pad_sequences([it["token_type_ids"] for it in items], length, 0),
        pad_sequences([[1] * len(r) for r in rows], length, 0),
        length,
    )
