"""The batch shapes the DataModules serve, and their padding.

One contract for every task: a batch unpacks as `inputs, targets = batch`. Language-model windows and images are
that pair (a tuple); batches with more parts are dataclasses with named fields (Lightning moves each tensor field
to the device) that unpack the same way.
"""

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


@dataclass
class TranslationBatch:
    """src, src_mask: (B, S) source ids and 1 for real tokens; tgt_in: (B, T) BOS + target (decoder inputs);
    labels: (B, T) target + EOS, padded with the pad id (which the loss ignores).
    src_text, ref_text: the raw sentences (evaluation only: BLEU references and logged examples).
    Unpacks as `inputs, targets = batch` (src, labels)."""

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


def padded_length(rows: list[list[int]], pad_to: str, block_size: int) -> int:
    """ "max_length": always block_size (fixed shapes); "longest": the longest row (less compute on short text)."""
    return block_size if pad_to == "max_length" else max(len(r) for r in rows)
