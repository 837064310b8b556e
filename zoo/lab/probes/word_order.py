"""WordOrderProbe: how much of a sentence classifier's dev accuracy needs word order at all.

After training, the dev set is classified twice: as it is, and with the words of each sentence in a random order
(seeded, the same order for every model of a sweep). A word is a WordPiece token and the `##` pieces that follow it,
so a shuffled sentence holds exactly the tokens of the original (nothing re-tokenized, nothing cut differently);
[CLS] and [SEP] stay where they are and each segment of a pair is shuffled within itself. A bag-of-words model
scores the same on both; the drop is what the model gets from order.

Records: lab/acc_ordered (the dev set as it is: val/acc recomputed here, so the drop compares like with like),
lab/acc_shuffled, lab/order_drop (ordered - shuffled).
"""

from __future__ import annotations

import random

import lightning as L
import torch
from lightning.pytorch.utilities import move_data_to_device

from .record import log_on_rank_zero


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


class WordOrderProbe(L.Callback):
    def __init__(self, seed: int = 0, batch_size: int = 64) -> None:
        if batch_size <= 0:
            raise ValueError(f"WordOrderProbe needs a positive batch_size, got {batch_size}")
        self.seed, self.batch_size = seed, batch_size
        self.metrics: dict[str, float] = {}

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
        self.metrics = {
            "lab/acc_ordered": ordered_acc,
            "lab/acc_shuffled": shuffled_acc,
            "lab/order_drop": ordered_acc - shuffled_acc,
        }
        log_on_rank_zero(trainer, self.metrics)

    @torch.no_grad()
    def _accuracy(self, pl_module, collate, items: list[dict]) -> float:
        was_training = pl_module.training
        pl_module.eval()
        correct = 0
        try:
            for start in range(0, len(items), self.batch_size):
                batch = move_data_to_device(collate(items[start : start + self.batch_size]), pl_module.device)
                correct += int((pl_module(batch).argmax(-1) == batch.labels).sum())
        finally:
            pl_module.train(was_training)
        return correct / len(items)

    def result_record(self) -> dict:
        return {"metrics": self.metrics}
