"""Datasets of fixed-length token windows over a 1-D token memmap: (input, next-token target) pairs."""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Dataset


class RandomWindows(Dataset):
    """Every start offset is a sample; the loader's shuffling makes the windows random (nanoGPT's get_batch)."""

    def __init__(self, tokens: np.ndarray, block_size: int, *, split: str | None = None) -> None:
        if len(tokens) <= block_size + 1:
            # `split` names which one ("train", "val"): the message a user sees should say which text is too short.
            more = "more text (a larger data.val_fraction, or data.val_files)" if split == "val" else "more text"
            raise ValueError(
                f"{f'the {split} split' if split else 'the text'} has {len(tokens)} tokens, too few for windows of "
                f"block_size={block_size} (at least {block_size + 2} needed); give {more} or a smaller data.block_size"
            )
        self.tokens, self.block_size = tokens, block_size

    def __len__(self) -> int:
        return len(self.tokens) - self.block_size - 1

    def __getitem__(self, i: int):
        chunk = torch.from_numpy(self.tokens[i : i + self.block_size + 1].astype(np.int64))
        return chunk[:-1], chunk[1:]


class DisjointWindows(RandomWindows):
    """Non-overlapping windows for evaluation. With `seed`, they come in a fixed shuffled order, so that a
    limited number of validation batches is a spread-out sample of the split, the same one at every check."""

    def __init__(self, tokens: np.ndarray, block_size: int, seed: int | None = None, *, split: str | None = None):
        super().__init__(tokens, block_size, split=split)
        count = (len(tokens) - 1) // block_size
        order = np.arange(count)
        if seed is not None:
            order = np.random.default_rng(seed).permutation(count)
        self.starts = order * block_size

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, i: int):
        return super().__getitem__(int(self.starts[i]))
