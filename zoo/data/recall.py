"""Synthetic sequence tasks that counting cannot solve, for the causal LM task: the answer to each scored position is
given earlier in the same sequence, at a place only attention can find, and nowhere in the statistics of the data.

- `mqar`, multi-query associative recall (Arora et al. 2023, "Zoology", section 3): `num_pairs` key-value pairs
  (keys distinct within a sequence), then `num_queries` of those keys, each followed by its value. Scored: the value
  after each queried key. Chance: 1 / num_values.
- `copy`, induction (Olsson et al. 2022): a random sequence of `num_pairs` tokens, then the same sequence again. Scored:
  every token of the second copy after its first (the first token cannot be told from what precedes it). Chance:
  1 / vocabulary. With `gap` > 0, `gap` random tokens are split at random between before the first copy and between
  the copies, so the distance between them varies from sequence to sequence: no head that attends a fixed offset
  back can copy, only one that finds the earlier occurrence of the current token and reads what followed it (an
  induction head, which takes two layers of attention).

Keys are ids [0, num_keys), values [num_keys, num_keys + num_values); `copy` draws from all of them. A batch is
(tokens, targets), as the character LM's: `targets` holds the token each position must predict, -100 where nothing is
scored, so the loss, `val/loss` and `val/acc` (the causal LM task) count the scored positions alone. The splits are
drawn from `split_seed` (train, val and test from different streams), so every run sees the same examples; `seed`
orders the training batches.
"""

from __future__ import annotations

import torch
from torch.utils.data import Dataset, TensorDataset

from .base import ZooDataModule

KINDS = ("mqar", "copy")
IGNORE = -100


def draw(
    kind: str, n: int, *, num_pairs: int, num_queries: int, num_keys: int, num_values: int, seed: int, gap: int = 0
):
    """`n` examples: (tokens (n, length), targets (n, length)) with targets IGNORE where nothing is scored."""
    g = torch.Generator().manual_seed(seed)
    if kind == "copy":
        vocab, length = num_keys + num_values, 2 * num_pairs + gap
        half = torch.randint(0, vocab, (n, num_pairs), generator=g)
        tokens = torch.randint(0, vocab, (n, length), generator=g)  # the gap's random tokens
        start = torch.randint(0, gap + 1, (n, 1), generator=g)  # where the first copy begins
        first = start + torch.arange(num_pairs)
        tokens.scatter_(1, first, half)
        tokens[:, num_pairs + gap :] = half  # the second copy ends the sequence
        targets = torch.full_like(tokens, IGNORE)
        targets[:, num_pairs + gap : length - 1] = tokens[:, num_pairs + gap + 1 :]  # each next token of the copy
        return tokens, targets
    keys = torch.rand(n, num_keys, generator=g).argsort(dim=1)[:, :num_pairs]  # distinct keys per sequence
    values = torch.randint(num_keys, num_keys + num_values, (n, num_pairs), generator=g)
    asked = torch.rand(n, num_pairs, generator=g).argsort(dim=1)[:, :num_queries]  # which pairs are queried
    pairs = torch.stack([keys, values], dim=2).reshape(n, 2 * num_pairs)
    queries = torch.stack([keys.gather(1, asked), values.gather(1, asked)], dim=2).reshape(n, 2 * num_queries)
    tokens = torch.cat([pairs, queries], dim=1)
    targets = torch.full_like(tokens, IGNORE)
    at = torch.arange(2 * num_pairs, tokens.shape[1], 2)  # the queried keys: each predicts the value after it
    targets[:, at] = tokens[:, at + 1]
    return tokens, targets


class RecallDataModule(ZooDataModule):
    """Multi-query associative recall or induction (copy) sequences for a GPT; see the module docstring.

    batch_size: sequences per step (global). num_train / num_val / num_test: examples per split."""

    task, description = "causal_lm", "a synthetic recall task"
    batch_unit = "sequences"

    def __init__(
        self,
        kind: str = "mqar",
        num_pairs: int = 16,
        num_queries: int = 16,
        num_keys: int = 64,
        num_values: int = 64,
        gap: int = 0,
        num_train: int = 20000,
        num_val: int = 1000,
        num_test: int = 1000,
        split_seed: int = 0,
        batch_size: int = 64,
        **shared,
    ) -> None:
        super().__init__(**shared)
        if kind not in KINDS:
            raise ValueError(f"data.kind must be one of {', '.join(KINDS)}, got {kind!r}")
        sizes = {"num_pairs": num_pairs, "num_keys": num_keys, "num_values": num_values, "batch_size": batch_size}
        sizes |= {"num_train": num_train, "num_val": num_val, "num_test": num_test}
        for name, value in sizes.items():
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"data.{name} must be a positive integer, got {value!r}")
        if not isinstance(gap, int) or gap < 0 or (gap and kind != "copy"):
            raise ValueError(f"data.gap must be a whole number >= 0, and 0 unless data.kind=copy; got {gap!r}")
        if kind == "mqar" and not 0 < num_queries <= num_pairs <= num_keys:
            raise ValueError(
                f"mqar needs 0 < data.num_queries <= data.num_pairs <= data.num_keys (the keys of a sequence are "
                f"distinct and each query asks one of them), got {num_queries}, {num_pairs}, {num_keys}"
            )
        self._splits: dict[str, Dataset] = {}

    @property
    def block_size(self) -> int:
        hp = self.hparams
        return 2 * hp.num_pairs + (2 * hp.num_queries if hp.kind == "mqar" else hp.gap)

    @property
    def model_fields(self) -> dict:
        return {"vocab_size": self.hparams.num_keys + self.hparams.num_values, "block_size": self.block_size}

    def build_splits(self) -> None:
        if self._splits:
            return
        hp = self.hparams
        sizes = {"train": hp.num_train, "val": hp.num_val, "test": hp.num_test}
        for i, (split, n) in enumerate(sizes.items()):
            tokens, targets = draw(
                hp.kind,
                n,
                num_pairs=hp.num_pairs,
                num_queries=hp.num_queries,
                num_keys=hp.num_keys,
                num_values=hp.num_values,
                gap=hp.gap,
                seed=hp.split_seed * len(sizes) + i,  # a stream of its own per split
            )
            self._splits[split] = TensorDataset(tokens, targets)

    def train_dataset(self) -> Dataset:
        return self._splits["train"]

    def eval_dataset(self, split: str) -> Dataset:
        return self._splits[split]
