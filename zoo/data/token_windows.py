"""The base of the causal-LM DataModules (its own module, so that lm.py and token_shards.py both build on it)."""

from __future__ import annotations

from .base import ZooDataModule
from .windows import DisjointWindows, RandomWindows


class TokenWindowsDataModule(ZooDataModule):
    """Causal-LM data as windows of block_size tokens over the token array a subclass gives by `tokens(split)`.
    Training windows start at every offset; evaluation reads disjoint windows of "val" (also the test split)."""

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
