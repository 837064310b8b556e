"""Tokenizers for language modelling: characters, or a byte-level BPE trained with `tokenizers`. Both serialize to
a JSON string that checkpoints store, so sampling never depends on the data folder.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

EOS = "<|endoftext|>"


class CharTokenizer:
    """One id per distinct character of the training text (nanoGPT's shakespeare_char)."""

    kind = "char"
    eos_id = None

    def __init__(self, chars: str) -> None:
        self.chars = chars
        self.index = {c: i for i, c in enumerate(chars)}

    @classmethod
    def train(cls, text: str) -> CharTokenizer:
        return cls("".join(sorted(set(text))))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> list[int]:
        unknown = sorted({c for c in text if c not in self.index})
        if unknown:
            raise ValueError(
                f"characters {''.join(unknown)!r} are not in the character vocabulary of this model "
                f"({self.vocab_size} characters: {self.chars!r}); remove them from the text"
            )
        return [self.index[c] for c in text]

    def decode(self, ids) -> str:
        return "".join(self.chars[i] for i in ids)

    def to_json(self) -> str:
        return json.dumps({"kind": self.kind, "chars": self.chars})


class BPETokenizer:
    """Byte-level BPE (GPT-2's scheme) trained with Hugging Face `tokenizers`; any text encodes."""

    kind = "bpe"

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.eos_id = tokenizer.token_to_id(EOS)

    @classmethod
    def train(cls, text: str, vocab_size: int) -> BPETokenizer:
        return cls.train_from_documents(iter(text.splitlines(keepends=True)), vocab_size)

    @classmethod
    def train_from_documents(cls, documents: Iterator[str], vocab_size: int) -> BPETokenizer:
        """Trained on a stream of documents: only a batch of 1000 of them is in memory at a time."""
        tokenizer = _byte_level(Tokenizer(models.BPE()))
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=[EOS],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        tokenizer.train_from_iterator(batched(documents, 1000), trainer)
        return cls(tokenizer)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text).ids

    def decode(self, ids) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def to_json(self) -> str:
        return json.dumps({"kind": self.kind, "tokenizer": self.tokenizer.to_str()})


def batched(items, size: int) -> Iterator[list[str]]:
    items = iter(items)
    while batch := list(itertools.islice(items, size)):
        yield batch


def _byte_level(tokenizer: Tokenizer) -> Tokenizer:
    """GPT-2's pre-tokenizer and decoder on `tokenizer`."""
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def load_published_tokenizer(path: str | Path) -> BPETokenizer:
    """A published byte-level BPE (GPT-2's kind): a tokenizer.json, or a directory holding one, or vocab.json +
    merges.txt. Its end-of-text token, if it has one, separates documents."""
    path = Path(path)
    if path.is_dir() and (path / "tokenizer.json").is_file():
        path = path / "tokenizer.json"
    if path.is_file():
        try:
            return BPETokenizer(Tokenizer.from_file(str(path)))
        except Exception as e:  # tokenizers raises a bare Exception for a file it cannot parse
            raise ValueError(f"{path} is not a tokenizer.json that `tokenizers` reads: {e}") from None
    vocab, merges = path / "vocab.json", path / "merges.txt"
    if path.is_dir() and vocab.is_file() and merges.is_file():
        return BPETokenizer(_byte_level(Tokenizer(models.BPE.from_file(str(vocab), str(merges)))))
    raise FileNotFoundError(
        f"no tokenizer at {path.resolve()}: give char, bpe, a tokenizer.json, or a directory holding tokenizer.json "
        "or vocab.json + merges.txt"
    )


def published_tokenizer_files(directory: str | Path) -> bool:
    """Whether a directory holds a published tokenizer that `load_published_tokenizer` reads."""
    directory = Path(directory)
    return (directory / "tokenizer.json").is_file() or (
        (directory / "vocab.json").is_file() and (directory / "merges.txt").is_file()
    )


def tokenizer_from_checkpoint(path: str | Path):
    """The tokenizer a zoo checkpoint (.ckpt) stores in its "zoo" section, whatever its kind."""
    from zoo.core.weights_file import torch_load_weights  # torch only here, when a checkpoint is read

    checkpoint = torch_load_weights(path)
    stored = checkpoint.get("zoo", {}).get("tokenizer") if isinstance(checkpoint, dict) else None
    if stored is None:
        raise ValueError(f"{path} stores no tokenizer; it is not a zoo checkpoint of a model of text")
    return tokenizer_from_json(stored)


def load_tokenizer(path: str | Path):
    """The tokenizer of a file or directory: a zoo checkpoint's (.ckpt), else a published one (tokenizer.json, or
    a directory holding it or vocab.json + merges.txt)."""
    path = Path(path)
    if path.is_file() and path.suffix == ".ckpt":
        return tokenizer_from_checkpoint(path)
    return load_published_tokenizer(path)


def tokenizer_from_json(data: str):
    spec = json.loads(data)
    if spec.get("kind") == "char":
        return CharTokenizer(spec["chars"])
    if spec.get("kind") == "bpe":
        return BPETokenizer(Tokenizer.from_str(spec["tokenizer"]))
    if spec.get("kind") == "wordpiece":
        from .wordpiece import WordPieceTokenizer  # the BERT tokenizer lives with the BERT data

        return WordPieceTokenizer.from_json(data)
    raise ValueError(f"unknown tokenizer kind {spec.get('kind')!r}")
