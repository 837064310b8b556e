"""Character tagging data: windows of text, each character with the tag of a stated rule (zoo/data/char_tags.py).
The text, its split and its character tokenizer are the language model's (zoo/data/lm.py).
"""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Dataset

from .char_tags import TAG_NAMES, char_kinds, tags_in_window, word_end_tags
from .lm import LanguageModelDataModule
from .windows import DisjointWindows


class TagWindows(Dataset):
    """Windows of `block_size` characters with their tags: every start offset (training), or the given `starts`
    (evaluation). A tag decided by a character beyond the window's end is IGNORE (zoo.data.char_tags)."""

    def __init__(
        self, tokens, tags: np.ndarray, reach: np.ndarray, block_size: int, starts=None, *, split: str = "train"
    ) -> None:
        if len(tokens) <= block_size:
            raise ValueError(
                f"the {split} split has {len(tokens)} characters, too few for windows of block_size={block_size} "
                f"(at least {block_size + 1} needed); use more text or a smaller data.block_size"
            )
        self.tokens, self.tags, self.reach, self.block_size = tokens, tags, reach, block_size
        self.starts = np.arange(len(tokens) - block_size) if starts is None else np.asarray(starts)

    def __len__(self) -> int:
        return len(self.starts)

    def __getitem__(self, i: int):
        s, b = int(self.starts[i]), self.block_size
        ids = torch.from_numpy(np.asarray(self.tokens[s : s + b], dtype=np.int64))
        return ids, torch.from_numpy(tags_in_window(self.tags[s : s + b], self.reach[s : s + b]))


class CharTaggingDataModule(LanguageModelDataModule):
    """Character tagging on the language model's text: each letter tagged by how its word ends. The vocabulary is
    the text's characters plus one padding id that no character uses (the encoder's padding row never trains)."""

    task, description = "token_tagging", "a character-tagging text dataset"
    tag_names = TAG_NAMES

    def __init__(self, batch_size: int = 32, tokenizer: str = "char", pretrained: str | None = None, **options) -> None:
        """The language model's options, with its tokenizer fixed to characters: one tag per token."""
        if tokenizer != "char" or pretrained is not None:
            given = f"tokenizer={tokenizer}" + (f", pretrained={pretrained}" if pretrained is not None else "")
            raise ValueError(
                f"character tagging tags one character per token: use data.tokenizer=char and no data.pretrained "
                f"(got {given})"
            )
        super().__init__(batch_size=batch_size, tokenizer=tokenizer, **options)
        self._tagged: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    @property
    def model_fields(self) -> dict:
        characters = self.tokenizer.vocab_size
        return {"vocab_size": characters + 1, "pad_token_id": characters}

    @property
    def task_inputs(self) -> dict:
        return {**super().task_inputs, "num_tags": len(self.tag_names)}

    def tagged(self, split: str) -> tuple[np.ndarray, np.ndarray]:
        """(tags, reach) of the whole split (zoo.data.char_tags.word_end_tags), computed once."""
        if split not in self._tagged:
            self._load()
            kinds = char_kinds(self.tokenizer.chars)
            self._tagged[split] = word_end_tags(np.asarray(self.tokens(split)), kinds)
        return self._tagged[split]

    def train_dataset(self) -> TagWindows:
        return TagWindows(self.tokens("train"), *self.tagged("train"), self.hparams.block_size)

    def eval_dataset(self, split: str) -> TagWindows:
        # The language model's disjoint validation windows, in the same spread-out order (limit_val_batches).
        seed = self.hparams.val_seed if split == "val" else None
        starts = DisjointWindows(self.tokens("val"), self.hparams.block_size, seed=seed).starts
        return TagWindows(self.tokens("val"), *self.tagged("val"), self.hparams.block_size, starts=starts, split="val")
