"""Datasets of fixed-length token windows over a 1-D token memmap: (input, next-token target) pairs."""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Dataset


class RandomWindows(Dataset):
    """Every start offset is a sample; the loader's shuffling makes the windows random (nanoGPT's get_batch)."""

    def __init__(self, tokens: np.ndarray, block_size: int) -> None:
        if len(tokens) <= block_size + 1:
            raise ValueError(
                f"the split has {len(tokens)} tokens, too few for windows of block_size={block_size}; "
                "use more text or a smaller block_size"
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

    def __init__(self, tokens: np.ndarray, block_size: int, seed: int | None = None) -> None:
        super().__init__(tokens, block_size)
        count = (len(tokens) - 1) // block_size
        order = np.arange(count)
        if seed is not None:
            order = np.random.default_rng(seed).permutation(count)
        self.starts = order * block_size

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, i: int):
        return super().__getitem__(int(self.starts[i]))
