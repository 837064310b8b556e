"""Sentence pairs stored as flat arrays and memory-mapped: what BERT pretraining makes once at prepare time.

A split is two files: `<split>.ids.npy`, every pair's [CLS] A [SEP] B [SEP] one after another, and
`<split>.index.npy`, one row per pair (start in the ids, length, length of segment 0 = |A| + 2, NSP label).
Validation pairs, masked once when they are made, add `<split>.labels.npy` (the MLM targets, -100 where nothing is
predicted) beside their masked ids. Memory-mapped, they cost nothing per process at start-up however many pairs
the `dupe_factor` passes made, and every rank and every start reads the same bytes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from torch.utils.data import Dataset

from .atomic import replacing


class PairWriter:
    """Collects the pairs of one split (a pass at a time: the token arrays are compact, the items are not), then
    writes its files."""

    def __init__(self, vocab_size: int) -> None:
        self.dtype = np.dtype(np.uint16 if vocab_size <= 2**16 else np.uint32)
        self.ids: list[np.ndarray] = []
        self.labels: list[np.ndarray] = []
        self.rows: list[tuple[int, int, int, int]] = []
        self.tokens = 0

    def add(self, items: list[dict]) -> None:
        """Items as the pair builder gives them: input_ids, token_type_ids, nsp_label (and labels, if masked)."""
        for item in items:
            length = len(item["input_ids"])
            first_segment = length - sum(item["token_type_ids"])
            self.rows.append((self.tokens, length, first_segment, item["nsp_label"]))
            self.ids.append(np.asarray(item["input_ids"], dtype=self.dtype))
            if "labels" in item:
                self.labels.append(np.asarray(item["labels"], dtype=np.int32))
            self.tokens += length

    def write(self, folder: Path, split: str) -> int:
        if not self.rows:
            raise ValueError(f"the {split} split makes no sentence pairs; give it more text")
        _save(folder / f"{split}.ids.npy", np.concatenate(self.ids))
        _save(folder / f"{split}.index.npy", np.asarray(self.rows, dtype=np.int64))
        if self.labels:
            _save(folder / f"{split}.labels.npy", np.concatenate(self.labels))
        return len(self.rows)


def _save(path: Path, array: np.ndarray) -> None:
    """Into a private file, then renamed: a reader never maps half an array."""
    with replacing(path) as tmp:
        np.save(tmp, array)


class StoredPairs(Dataset):
    """The pairs of one split, memory-mapped; an item is what the pretraining collator takes."""

    def __init__(self, folder: Path, split: str) -> None:
        self.ids = np.load(folder / f"{split}.ids.npy", mmap_mode="r")
        self.index = np.load(folder / f"{split}.index.npy", mmap_mode="r")
        labels = folder / f"{split}.labels.npy"
        self.labels = np.load(labels, mmap_mode="r") if labels.is_file() else None

    def __len__(self) -> int:
        return len(self.index)

    @property
    def nsp_labels(self) -> np.ndarray:
        return np.asarray(self.index[:, 3])

    def __getitem__(self, i: int) -> dict:
        start, length, first_segment, nsp_label = (int(v) for v in self.index[i])
        item = {
            "input_ids": self.ids[start : start + length].astype(np.int64).tolist(),
            "token_type_ids": [0] * first_segment + [1] * (length - first_segment),
            "nsp_label": nsp_label,
        }
        if self.labels is not None:
            item["labels"] = self.labels[start : start + length].astype(np.int64).tolist()
        return item
