"""The batch of the BERT DataModules (pretraining and sentence classification) and its padding."""

from __future__ import annotations

from dataclasses import dataclass

import torch

PAD_TO = ("max_length", "longest")


@dataclass
class EncoderBatch:
    """input_ids, token_type_ids, attention_mask: (B, T); attention_mask is 1 for real tokens, 0 for padding.
    labels: MLM targets (B, T) with -100 where nothing is predicted, or class labels (B,) for classification.
    nsp_labels: (B,) 0 = B follows A, 1 = B is random (pretraining only).

    A dataclass, so Lightning moves every field to the device; it also unpacks as `inputs, targets = batch`
    like the language-model batches."""

    input_ids: torch.Tensor
    token_type_ids: torch.Tensor
    attention_mask: torch.Tensor
    labels: torch.Tensor
    nsp_labels: torch.Tensor | None = None

    def __iter__(self):
        return iter((self.input_ids, self.labels))


def pad_sequences(rows: list[list[int]], length: int, value: int) -> torch.Tensor:
    out = torch.full((len(rows), length), value, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.as_tensor(row, dtype=torch.long)
    return out


def padded_length(rows: list[list[int]], pad_to: str, block_size: int) -> int:
    """ "max_length": always block_size (fixed shapes); "longest": the longest row (less compute on short text)."""
    return block_size if pad_to == "max_length" else max(len(r) for r in rows)
