"""The base of the causal-LM DataModules: windows of block_size tokens over one token array per split.

Its own module so that the LM DataModule (zoo/data/lm.py) and the token-shard one (zoo/data/token_shards.py) can
both build on it while lm.py also reads the shards that token_shards.py opens (no import cycle between the two).
"""

from __future__ import annotations

from .base import ZooDataModule
from .windows import DisjointWindows, RandomWindows


class TokenWindowsDataModule(ZooDataModule):
    """Causal-LM data as windows of block_size tokens over one token array per split ("train", "val"), which a
    subclass gives by `tokens(split)`, with its `tokenizer`. Training windows start at every offset; evaluation
    reads disjoint windows, and the test split is the validation split in full."""

    def tokens(self, split: str):
        raise NotImplementedError

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    @property
    def model_fields(self) -> dict:
        return {"vocab_size": self.vocab_size}

    def train_dataset(self) -> RandomWindows:
        return RandomWindows(self.tokens("train"), self.hparams.block_size, split="train")

    def eval_dataset(self, split: str) -> DisjointWindows:
        # Validation's windows come in a fixed shuffled order, so that limit_val_batches scores a spread-out sample.
        seed = self.hparams.val_seed if split == "val" else None
        return DisjointWindows(self.tokens("val"), self.hparams.block_size, seed=seed, split="val")
