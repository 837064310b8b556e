"""WordOrderProbe: how much of a sentence classifier's dev accuracy needs word order at all. After training the dev
set is classified as it is (`lab/acc_ordered`) and with the words of each sentence in a seeded random order
(`lab/acc_shuffled`; `lab/order_drop` the difference). A word is a WordPiece token and its `##` pieces; [CLS] and
[SEP] stay where they are, each segment of a pair shuffled within itself."""

from __future__ import annotations

import random

import torch
from lightning.pytorch.utilities import move_data_to_device

from .batches import evaluating
from .record import Recorder


def shuffle_words(ids: list[int], continuation: set[int], special: set[int], rng: random.Random) -> list[int]:
    """`ids` with the words between special tokens in a random order (a word: a piece and its `##` pieces)."""
    out: list[int] = []
    words: list[list[int]] = []

    def flush() -> None:
        rng.shuffle(words)
        out.extend(t for word in words for t in word)
        words.clear()

    for token in ids:
        if token in special:
            flush()
            out.append(token)
        elif token in continuation and words:
            words[-1].append(token)
        else:
            words.append([token])
    flush()
    return out


class WordOrderProbe(Recorder):
    def __init__(self, seed: int = 0, batch_size: int = 64) -> None:
        if batch_size <= 0:
            raise ValueError(f"WordOrderProbe needs a positive batch_size, got {batch_size}")
        super().__init__()
        self.seed, self.batch_size = seed, batch_size

    @staticmethod
    def shuffled_items(data, seed: int) -> tuple[list[dict], list[dict]]:
        """(the dev items, the same with their words shuffled), from a GlueDataModule's validation split."""
        tokenizer = getattr(data, "tokenizer", None)
        if tokenizer is None or not hasattr(tokenizer, "special_ids"):
            raise ValueError("WordOrderProbe is for WordPiece sentence classification (data=sst2 or another GLUE task)")
        vocab = tokenizer.tokenizer.get_vocab()
        continuation = {i for token, i in vocab.items() if token.startswith("##")}
        items = data.val_dataloader().dataset.items
        rng = random.Random(seed)
        special = set(tokenizer.special_ids)
        return items, [{**it, "input_ids": shuffle_words(it["input_ids"], continuation, special, rng)} for it in items]

    def on_train_end(self, trainer, pl_module) -> None:
        ordered, shuffled = self.shuffled_items(trainer.datamodule, self.seed)
        collate = trainer.datamodule.collate(False)
        ordered_acc, shuffled_acc = (self._accuracy(pl_module, collate, items) for items in (ordered, shuffled))
        drop = ordered_acc - shuffled_acc
        self.record(trainer, {"lab/acc_ordered": ordered_acc, "lab/acc_shuffled": shuffled_acc, "lab/order_drop": drop})

    @torch.no_grad()
    def _accuracy(self, pl_module, collate, items: list[dict]) -> float:
        correct = 0
        with evaluating(pl_module):
            for start in range(0, len(items), self.batch_size):
                batch = move_data_to_device(collate(items[start : start + self.batch_size]), pl_module.device)
                correct += int((pl_module(batch).argmax(-1) == batch.labels).sum())
        return correct / len(items)
