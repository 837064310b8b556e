"""BERT pretraining data: documents -> sentences -> next-sentence pairs -> masked-LM inputs.

The pair recipe is the original one (create_pretraining_data.py of google-research/bert): sentences of a document
accumulate into a chunk of about block_size tokens (sometimes shorter, `short_seq_prob`); a random cut makes A;
half the time B is the rest of the chunk (label 0), otherwise B is drawn from another document (label 1) and the
chunk's unused sentences are put back for the next pair. One deviation: a one-sentence chunk that should get its
true continuation borrows the next sentence instead of forcing a random B. Each of the `dupe_factor` passes draws
new pairs. Training masks are drawn per batch; validation masks once, so that validation numbers are comparable.

The pairs are made once, by one process (zoo/data/prepare_lock.py), and stored in the cache keyed by the text, the
tokenizer and every setting that decides them, as memory-mapped flat arrays: `<split>.ids.npy`, every pair's
[CLS] A [SEP] B [SEP] one after another, `<split>.index.npy`, one row per pair (start, length, length of segment 0,
NSP label), and for validation pairs, masked once, `<split>.labels.npy` (the MLM targets).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from .atomic import atomic_write, replacing
from .base import ZooDataModule
from .batches import PAD_TO, EncoderBatch, pad_encoder_items, pad_sequences
from .prepare_lock import prepare_once
from .text import read_text_file
from .wordpiece import WordPieceTokenizer, cached_wordpiece

DOCUMENT_FORMATS = ("blank_lines", "wikitext")
# Part of the stored pairs' cache key: raise it when the pair recipe changes.
PAIRS_REVISION = 1

# A sentence ends at . ! or ? followed by whitespace and an upper-case letter, digit or opening quote/bracket.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")
_WIKITEXT_TITLE = re.compile(r"^ ?= [^=].* = ?$")  # " = Title = " starts an article; " = = Section = = " does not
_WIKITEXT_HEADING = re.compile(r"^ ?(= )+.*( =)+ ?$")


def split_sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(text.strip()) if s.strip()]


def read_documents(text: str, document_format: str) -> list[list[str]]:
    """Documents as lists of sentences. "blank_lines": blank lines separate documents (BERT's input format);
    "wikitext": a ` = Title = ` line starts an article, section headings are dropped, blank lines are not breaks."""
    documents: list[list[str]] = [[]]
    for line in text.splitlines():
        if document_format == "wikitext":
            if _WIKITEXT_TITLE.match(line):
                documents.append([])
                continue
            if _WIKITEXT_HEADING.match(line):
                continue
        elif not line.strip():
            documents.append([])
            continue
        documents[-1].extend(split_sentences(line))
    return [d for d in documents if d]


@dataclass
class NSPPair:
    tokens_a: list[int]
    tokens_b: list[int]
    is_random_next: bool
    document_a: int  # index of the document A comes from
    document_b: int  # ... and B (equal unless is_random_next)


def truncate_pair(a: list[int], b: list[int], max_tokens: int, rng: random.Random) -> None:
    """Shorten the longer segment, one token at a time from its front or back at random (in place)."""
    while len(a) + len(b) > max_tokens:
        longer = a if len(a) > len(b) else b
        if rng.random() < 0.5:
            del longer[0]
        else:
            longer.pop()


def make_nsp_pairs(
    documents: list[list[list[int]]],
    max_seq_length: int,
    rng: random.Random,
    *,
    short_seq_prob: float = 0.1,
    random_next_prob: float = 0.5,
) -> list[NSPPair]:
    """One pass over tokenized documents (lists of sentences of ids). Every pair fits [CLS] A [SEP] B [SEP]
    in max_seq_length tokens."""
    if len(documents) < 2:
        raise ValueError(
            f"next-sentence pairs need at least 2 documents, the corpus has {len(documents)}; "
            "separate documents with blank lines (or use document_format=wikitext)"
        )
    max_tokens = max_seq_length - 3  # >= 2: block_size >= 5
    pairs: list[NSPPair] = []
    for doc_index, document in enumerate(documents):
        target = rng.randint(2, max_tokens) if rng.random() < short_seq_prob else max_tokens
        chunk: list[list[int]] = []
        length = 0
        i = 0
        while i < len(document):
            chunk.append(document[i])
            length += len(document[i])
            if i == len(document) - 1 or length >= target:
                is_random = rng.random() < random_next_prob
                if not is_random and len(chunk) == 1 and i + 1 < len(document):
                    # Borrow the next sentence rather than force a random B, which skews the labels to "random".
                    i += 1
                    chunk.append(document[i])
                a_end = 1 if len(chunk) < 2 else rng.randint(1, len(chunk) - 1)
                tokens_a = [t for sentence in chunk[:a_end] for t in sentence]
                if len(chunk) == 1 or is_random:
                    other = rng.randrange(len(documents) - 1)
                    other += other >= doc_index  # any document but this one
                    source = documents[other]
                    tokens_b: list[int] = []
                    for sentence in source[rng.randrange(len(source)) :]:
                        tokens_b.extend(sentence)
                        if len(tokens_b) >= target - len(tokens_a):
                            break
                    i -= len(chunk) - a_end  # the unused sentences are put back
                    pair = NSPPair(tokens_a, tokens_b, True, doc_index, other)
                else:
                    tokens_b = [t for sentence in chunk[a_end:] for t in sentence]
                    pair = NSPPair(tokens_a, tokens_b, False, doc_index, doc_index)
                truncate_pair(pair.tokens_a, pair.tokens_b, max_tokens, rng)
                if pair.tokens_a and pair.tokens_b:
                    pairs.append(pair)
                chunk, length = [], 0
                target = rng.randint(2, max_tokens) if rng.random() < short_seq_prob else max_tokens
            i += 1
    return pairs


def mask_tokens(
    input_ids: torch.Tensor,
    maskable: torch.Tensor,
    *,
    mask_id: int,
    replacement_ids: torch.Tensor,
    mlm_probability: float = 0.15,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's masking. In each row, round(mlm_probability x the maskable tokens) of them (at least one) are
    chosen; of those 80% become [MASK], 10% a random token from `replacement_ids`, 10% stay. Returns (inputs,
    labels) with labels = the original id where chosen and -100 elsewhere. `maskable` is False on special
    tokens and padding. The draws are made on the ids' device (as is `generator`)."""
    maskable = maskable.to(torch.bool)
    count = maskable.sum(dim=1)
    k = torch.minimum((count.float() * mlm_probability).round().long().clamp(min=1), count)
    # A random order of the maskable positions (others sort last); the first k of each row are chosen.
    device = input_ids.device
    scores = torch.rand(input_ids.shape, generator=generator, device=device).masked_fill(~maskable, 2.0)
    rank = scores.argsort(dim=1).argsort(dim=1)
    chosen = rank < k[:, None]
    labels = input_ids.masked_fill(~chosen, -100)
    action = torch.rand(input_ids.shape, generator=generator, device=device)
    to_mask = chosen & (action < 0.8)
    to_random = chosen & (action >= 0.8) & (action < 0.9)
    draws = torch.randint(len(replacement_ids), input_ids.shape, generator=generator, device=device)
    random_ids = replacement_ids.to(device)[draws]
    inputs = input_ids.masked_fill(to_mask, mask_id)
    inputs = torch.where(to_random, random_ids, inputs)
    return inputs, labels


class PretrainingCollator:
    """Pads a list of pairs and masks them (training), or pads pairs that were masked once (validation)."""

    def __init__(self, tokenizer: WordPieceTokenizer, *, block_size: int, pad_to: str, mlm_probability: float):
        self.pad_id, self.mask_id = tokenizer.pad_id, tokenizer.mask_id
        self.special = torch.tensor(sorted(tokenizer.special_ids))
        ids = torch.arange(tokenizer.vocab_size)
        self.replacement_ids = ids[~torch.isin(ids, self.special)]
        self.block_size, self.pad_to, self.mlm_probability = block_size, pad_to, mlm_probability

    def mask(self, input_ids: torch.Tensor, generator: torch.Generator | None = None):
        maskable = ~torch.isin(input_ids, self.special)
        return mask_tokens(
            input_ids,
            maskable,
            mask_id=self.mask_id,
            replacement_ids=self.replacement_ids,
            mlm_probability=self.mlm_probability,
            generator=generator,
        )

    def __call__(self, items: list[dict]) -> EncoderBatch:
        input_ids, token_type_ids, attention_mask, length = pad_encoder_items(
            items, self.pad_id, self.pad_to, self.block_size
        )
        if "labels" in items[0]:
            labels = pad_sequences([it["labels"] for it in items], length, -100)
        else:
            input_ids, labels = self.mask(input_ids)
        nsp_labels = torch.tensor([it["nsp_label"] for it in items], dtype=torch.long)
        return EncoderBatch(input_ids, token_type_ids, attention_mask, labels, nsp_labels)


class PairWriter:
    """Collects the pairs of one split (a pass at a time: the token arrays are compact, the items are not)."""

    def __init__(self, vocab_size: int) -> None:
        self.dtype = np.dtype(np.uint16 if vocab_size <= 2**16 else np.uint32)
        self.ids: list[np.ndarray] = []
        self.labels: list[np.ndarray] = []
        self.rows: list[tuple[int, int, int, int]] = []
        self.tokens = 0

    def add(self, items: list[dict]) -> None:
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


class PairDataset(Dataset):
    def __init__(self, items: list[dict]) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict:
        return self.items[index]


class BertPretrainingDataModule(ZooDataModule):
    """MLM + NSP data from plain-text files.

    Files are `train_files` / `val_files`, relative to the data folder unless absolute; without `val_files` the
    last `val_fraction` of the training documents is held out. `dataset` names a registered dataset whose files
    are fetched or checked first. The WordPiece vocabulary is trained on the training documents and cached, unless
    `vocab_file` gives a BERT vocab.txt. The test split is the validation split.
    """

    task, description = "mlm_nsp", "an MLM+NSP pretraining dataset"

    def __init__(
        self,
        train_files: list[str],
        val_files: list[str] | None = None,
        dataset: str | None = None,
        document_format: str = "blank_lines",
        vocab_file: str | None = None,
        vocab_size: int = 8192,
        lowercase: bool = True,
        block_size: int = 128,
        batch_size: int = 32,
        pad_to: str = "max_length",
        mlm_probability: float = 0.15,
        short_seq_prob: float = 0.1,
        random_next_prob: float = 0.5,
        dupe_factor: int = 5,
        val_fraction: float = 0.1,
        max_documents: int | None = None,
        seed: int = 12345,
        **shared,
    ) -> None:
        super().__init__(seed=seed, **shared)
        if not train_files:
            raise ValueError("data.train_files is empty; list the text files to pretrain on")
        if document_format not in DOCUMENT_FORMATS:
            raise ValueError(
                f"unknown document_format '{document_format}'; choose one of {', '.join(DOCUMENT_FORMATS)}"
            )
        if pad_to not in PAD_TO:
            raise ValueError(f"unknown pad_to '{pad_to}'; choose one of {', '.join(PAD_TO)}")
        if not 0.0 < mlm_probability < 1.0 or not 0.0 <= random_next_prob <= 1.0:
            raise ValueError(
                f"mlm_probability ({mlm_probability}) must be in (0, 1) and random_next_prob "
                f"({random_next_prob}) in [0, 1]"
            )
        if block_size < 5 or batch_size <= 0 or dupe_factor <= 0:
            raise ValueError(
                f"need block_size >= 5 (got {block_size}), batch_size > 0 (got {batch_size}) and "
                f"dupe_factor > 0 (got {dupe_factor})"
            )
        if val_files is None and not 0.0 < val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
        self._tokenizer: WordPieceTokenizer | None = None
        self._datasets: dict[str, StoredPairs] = {}
        self._digests: dict[tuple[Path, ...], str] = {}

    def _files(self) -> tuple[list[Path], list[Path] | None]:
        hp = self.hparams
        if hp.dataset is not None:
            self.dataset_files(hp.dataset)  # fetched (or checked) before the files are read
        train = [self.data_dir / p for p in hp.train_files]  # an absolute path stays itself
        val = [self.data_dir / p for p in hp.val_files] if hp.val_files else None
        for path in train + (val or []):
            if not path.is_file():
                raise FileNotFoundError(
                    f"text file not found: {path.resolve()}; check data.train_files / data.val_files (relative "
                    f"paths are below the data folder {self.data_dir}, set by ZOO_DATA_DIR)"
                )
        return train, val

    def _documents(self, paths: list[Path]) -> list[list[str]]:
        key = f"dataset '{self.hparams.dataset}'" if self.hparams.dataset else "data.train_files / data.val_files"
        text = "\n\n".join(read_text_file(p, key) for p in paths)
        documents = read_documents(text, self.hparams.document_format)
        if self.hparams.max_documents is not None:
            documents = documents[: self.hparams.max_documents]
        return documents

    def _split(self) -> tuple[list[list[str]], list[list[str]]]:
        train_files, val_files = self._files()
        train = self._documents(train_files)
        if val_files is not None:
            return train, self._documents(val_files)
        cut = max(1, round(len(train) * (1 - self.hparams.val_fraction)))
        if cut >= len(train) - 1:
            raise ValueError(
                f"{len(train)} documents are too few to hold out a validation set of 2; "
                "give data.val_files or more text"
            )
        return train[:cut], train[cut:]

    def _content_digest(self, paths: list[Path]) -> str:
        """The files' names and bytes, hashed once (two cache keys use them)."""
        key = tuple(paths)
        if key not in self._digests:
            digest = hashlib.sha256()
            for path in paths:
                digest.update(path.name.encode())
                digest.update(path.read_bytes())
            self._digests[key] = digest.hexdigest()
        return self._digests[key]

    def prepare_data(self) -> None:
        """Train the WordPiece vocabulary and make the sentence pairs, once; later runs and other ranks read them."""
        folder = self.pairs_folder()
        prepare_once(folder / "pairs.json", lambda: self._make_pairs(folder), what="the sentence pairs")

    @property
    def tokenizer(self) -> WordPieceTokenizer:
        if self._tokenizer is None:
            hp = self.hparams
            if hp.vocab_file is not None:
                self._tokenizer = WordPieceTokenizer.from_vocab_file(
                    self.data_dir / hp.vocab_file, lowercase=hp.lowercase
                )
            else:
                train = self._files()[0]
                key = [self._content_digest(train), hp.document_format, hp.max_documents]
                texts = lambda: (" ".join(d) for d in self._split()[0])
                name = hp.dataset or train[0].stem
                self._tokenizer = cached_wordpiece(self.cache_dir, name, key, texts, hp.vocab_size, hp.lowercase)
        return self._tokenizer

    @property
    def model_fields(self) -> dict:
        return {"vocab_size": self.tokenizer.vocab_size, "pad_token_id": self.tokenizer.pad_id}

    def _encode(self, documents: list[list[str]]) -> list[list[list[int]]]:
        flat = [s for d in documents for s in d]
        ids = iter(self.tokenizer.encode_batch(flat))
        encoded = [[next(ids) for _ in d] for d in documents]
        return [[s for s in d if s] for d in encoded if any(d)]

    def item_passes(self, documents: list[list[str]], *, passes: int, seed: int) -> Iterator[list[dict]]:
        """The pairs of each of `passes` passes over the documents (one random stream through all of them)."""
        hp = self.hparams
        encoded = self._encode(documents)
        rng = random.Random(seed)
        for _ in range(passes):
            items = []
            for pair in make_nsp_pairs(
                encoded, hp.block_size, rng, short_seq_prob=hp.short_seq_prob, random_next_prob=hp.random_next_prob
            ):
                ids, segments = self.tokenizer.build_pair(pair.tokens_a, pair.tokens_b)
                items.append({"input_ids": ids, "token_type_ids": segments, "nsp_label": int(pair.is_random_next)})
            yield items

    def build_items(self, documents: list[list[str]], *, passes: int, seed: int) -> list[dict]:
        """All pairs of `passes` passes: what the stored pairs hold, item for item."""
        return [item for items in self.item_passes(documents, passes=passes, seed=seed) for item in items]

    def pairs_folder(self) -> Path:
        """Where the pairs are stored: keyed by the text, the tokenizer and every setting that decides them."""
        hp = self.hparams
        train, val = self._files()
        digest = hashlib.sha256(self.tokenizer.to_json().encode())
        digest.update(bytes.fromhex(self._content_digest(train)))
        digest.update(bytes.fromhex(self._content_digest(val)) if val else b"held out")
        settings = [
            hp.document_format,
            hp.max_documents,
            None if val else hp.val_fraction,
            hp.block_size,
            hp.short_seq_prob,
            hp.random_next_prob,
            hp.dupe_factor,
            hp.mlm_probability,  # the validation masks
            hp.seed,
            PAIRS_REVISION,
        ]
        digest.update(json.dumps(settings).encode())
        return self.cache_dir / f"{hp.dataset or train[0].stem}-pairs-{digest.hexdigest()[:16]}"

    def _make_pairs(self, folder: Path) -> None:
        """Every pass's training pairs, and the validation pairs with their masks drawn once; `pairs.json` last."""
        hp = self.hparams
        train_docs, val_docs = self._split()
        counts = {}
        train = PairWriter(self.tokenizer.vocab_size)
        for items in self.item_passes(train_docs, passes=hp.dupe_factor, seed=hp.seed):
            train.add(items)
        counts["train"] = train.write(folder, "train")
        val = PairWriter(self.tokenizer.vocab_size)
        collator, generator = self.collator(), torch.Generator().manual_seed(hp.seed + 2)
        for items in self.item_passes(val_docs, passes=1, seed=hp.seed + 1):
            for item in items:
                inputs, labels = collator.mask(torch.tensor([item["input_ids"]]), generator)
                item["input_ids"], item["labels"] = inputs[0].tolist(), labels[0].tolist()
            val.add(items)
        counts["val"] = val.write(folder, "val")
        atomic_write(folder / "pairs.json", json.dumps({"pairs": counts, "revision": PAIRS_REVISION}))

    def collator(self) -> PretrainingCollator:
        hp = self.hparams
        return PretrainingCollator(
            self.tokenizer, block_size=hp.block_size, pad_to=hp.pad_to, mlm_probability=hp.mlm_probability
        )

    def build_splits(self) -> None:
        if self._datasets:
            return
        self.prepare_data()
        folder = self.pairs_folder()
        self._datasets = {split: StoredPairs(folder, split) for split in ("train", "val")}

    def train_dataset(self) -> StoredPairs:
        return self._datasets["train"]

    def eval_dataset(self, split: str) -> StoredPairs:
        return self._datasets["val"]

    def collate(self, train: bool) -> PretrainingCollator:
        return self.collator()
