"""Translation DataModule: parallel text -> subword BPE (cached) -> batches by token count, bucketed by length.

Multi30k is the named dataset: `<split>.<lang>.gz`, aligned by line. A pair with an empty side is skipped, with a
warning; a pair longer than `max_length` tokens on either side is dropped from training and truncated in val/test
(so the evaluation set stays complete), with a warning.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import warnings
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from .atomic import atomic_write, replacing
from .base import ZooDataModule
from .batches import TranslationBatch
from .prepare_lock import prepare_once
from .text import decode_utf8
from .translation_tokenizer import BOS_ID, EOS_ID, PAD_ID, TranslationTokenizer

SPLITS = ("train", "val", "test")


def read_lines(path: Path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        return decode_utf8(f.read(), path, "a parallel corpus").splitlines()


def read_parallel(source_path: Path, target_path: Path) -> tuple[list[str], list[str]]:
    """Both sides of a parallel corpus, stripped, after dropping pairs with an empty side."""
    source, target = read_lines(source_path), read_lines(target_path)
    if len(source) != len(target):
        raise ValueError(
            f"parallel files differ in length: {source_path} has {len(source)} lines but {target_path} has "
            f"{len(target)}; line i of one must translate line i of the other"
        )
    pairs = [(s.strip(), t.strip()) for s, t in zip(source, target)]
    kept = [(s, t) for s, t in pairs if s and t]
    if len(kept) < len(pairs):
        warnings.warn(
            f"{source_path.name}/{target_path.name}: skipped {len(pairs) - len(kept)} pairs with an empty side",
            stacklevel=2,
        )
    if not kept:
        raise ValueError(f"{source_path} and {target_path} hold no pair with text on both sides")
    return [s for s, _ in kept], [t for _, t in kept]


def make_batches(src_lens: np.ndarray, tgt_lens: np.ndarray, max_tokens: int, seed: int | None) -> list[np.ndarray]:
    """Group sentence indices into batches of at most `max_tokens` padded tokens (sentences x the longest side),
    sorted by length (with a seed, equal lengths are shuffled); a pair longer than max_tokens is a batch alone."""
    n = len(src_lens)
    tie_break = np.random.default_rng(seed).permutation(n) if seed is not None else np.arange(n)
    order = np.lexsort((tie_break, tgt_lens, src_lens))
    batches, start, longest = [], 0, 0
    for pos, i in enumerate(order):
        longest_with_i = max(longest, src_lens[i], tgt_lens[i])
        if pos > start and longest_with_i * (pos - start + 1) > max_tokens:
            batches.append(order[start:pos])
            start, longest_with_i = pos, max(src_lens[i], tgt_lens[i])
        longest = longest_with_i
    if start < n:
        batches.append(order[start:])
    return batches


class TokenBatches(Dataset):
    """A dataset whose items are whole, padded batches (so that a DistributedSampler shards batches)."""

    def __init__(
        self,
        src: list[np.ndarray],
        tgt: list[np.ndarray],
        batches: list[np.ndarray],
        src_text: list[str] | None = None,
        tgt_text: list[str] | None = None,
    ) -> None:
        self.src, self.tgt, self.batches = src, tgt, batches
        self.src_text, self.tgt_text = src_text, tgt_text

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, i: int) -> TranslationBatch:
        idx = self.batches[i]
        src = [self.src[j] for j in idx]
        tgt = [self.tgt[j] for j in idx]
        n, s, t = len(idx), max(len(x) for x in src), max(len(y) for y in tgt) + 1
        batch = TranslationBatch(
            src=torch.full((n, s), PAD_ID, dtype=torch.long),
            src_mask=torch.zeros(n, s, dtype=torch.long),
            tgt_in=torch.full((n, t), PAD_ID, dtype=torch.long),
            labels=torch.full((n, t), PAD_ID, dtype=torch.long),
        )
        for row, (x, y) in enumerate(zip(src, tgt)):
            y = torch.from_numpy(y.astype(np.int64))
            batch.src[row, : len(x)] = torch.from_numpy(x.astype(np.int64))
            batch.src_mask[row, : len(x)] = 1
            batch.tgt_in[row, 0] = BOS_ID
            batch.tgt_in[row, 1 : len(y) + 1] = y
            batch.labels[row, : len(y)] = y
            batch.labels[row, len(y)] = EOS_ID
        if self.tgt_text is not None:  # evaluation: the raw text, for BLEU
            batch.src_text = [self.src_text[j] for j in idx]
            batch.ref_text = [self.tgt_text[j] for j in idx]
        return batch


class TranslationDataModule(ZooDataModule):
    """Parallel-text data for translation. `max_tokens` is the global batch in padded tokens per side; `vocab_size`
    is the joint BPE's size, or each language's with joint_vocab=false."""

    task, description = "seq2seq", "a translation dataset"
    batch_option, batch_unit = "max_tokens", ", in tokens"

    def __init__(
        self,
        dataset: str = "multi30k",
        source_lang: str = "de",
        target_lang: str = "en",
        train_split: str = "train",
        val_split: str = "val",
        test_split: str = "test_2016_flickr",
        vocab_size: int = 8000,
        joint_vocab: bool = True,
        max_tokens: int = 4096,
        max_length: int = 256,
        **shared,
    ) -> None:
        super().__init__(**shared)
        if source_lang == target_lang:
            raise ValueError(f"source_lang and target_lang are both '{source_lang}'; pick two languages")
        if vocab_size < 64 or max_tokens <= 0 or max_length < 2:
            raise ValueError(
                f"need vocab_size >= 64 (got {vocab_size}), max_tokens > 0 (got {max_tokens}) "
                f"and max_length >= 2 (got {max_length})"
            )
        self._tokenizer: TranslationTokenizer | None = None
        self._encoded: dict[str, tuple[list[np.ndarray], list[np.ndarray]]] = {}
        self._text: dict[str, tuple[list[str], list[str]]] = {}

    def split_files(self, split: str) -> tuple[Path, Path]:
        hp = self.hparams
        name = {"train": hp.train_split, "val": hp.val_split, "test": hp.test_split}[split]
        paths = {p.name: p for p in self.dataset_files(hp.dataset)}
        files = []
        for lang in (hp.source_lang, hp.target_lang):
            file = f"{name}.{lang}.gz"
            if file not in paths:
                langs = sorted({p.split(".")[-2] for p in paths})
                raise ValueError(f"dataset '{hp.dataset}' has no {file}; its languages are {', '.join(langs)}")
            files.append(paths[file])
        return files[0], files[1]

    def _cache_folder(self) -> Path:
        hp = self.hparams
        digest = hashlib.sha256()
        for split in SPLITS:
            for path in self.split_files(split):
                digest.update(path.name.encode() + path.read_bytes())
        digest.update(json.dumps([hp.vocab_size, hp.joint_vocab, hp.max_length]).encode())
        vocab = f"{'joint' if hp.joint_vocab else 'sep'}{hp.vocab_size}"
        return self.cache_dir / f"{hp.dataset}-{hp.source_lang}-{hp.target_lang}-{vocab}-{digest.hexdigest()[:16]}"

    def prepare_data(self) -> None:
        """Train the BPE on the training split and encode every split once; later runs reuse the cache."""
        folder = self._cache_folder()
        prepare_once(folder / "tokenizer.json", lambda: self._encode_into(folder), what="the encoded sentence pairs")

    def _encode_into(self, folder: Path) -> None:
        hp = self.hparams
        src, tgt = read_parallel(*self.split_files("train"))
        tokenizer = TranslationTokenizer.train(
            src,
            tgt,
            vocab_size=hp.vocab_size,
            joint=hp.joint_vocab,
            source_lang=hp.source_lang,
            target_lang=hp.target_lang,
        )
        folder.mkdir(parents=True, exist_ok=True)
        for split in SPLITS:
            if split != "train":
                src, tgt = read_parallel(*self.split_files(split))
            arrays = {}
            for side, ids in (("src", tokenizer.encode_source_batch(src)), ("tgt", tokenizer.encode_target_batch(tgt))):
                arrays[f"{side}_ids"] = np.fromiter((i for row in ids for i in row), dtype=np.int32)
                arrays[f"{side}_lens"] = np.array([len(row) for row in ids], dtype=np.int32)
            with replacing(folder / f"{split}.npz") as tmp:
                np.savez(tmp, **arrays)
        atomic_write(folder / "tokenizer.json", tokenizer.to_json())  # written last: marks the cache complete

    def _load(self) -> None:
        if self._tokenizer is not None:
            return
        self.prepare_data()
        folder = self._cache_folder()
        self._tokenizer = TranslationTokenizer.from_json((folder / "tokenizer.json").read_text())
        for split in SPLITS:
            arrays = np.load(folder / f"{split}.npz")
            sides = []
            for side in ("src", "tgt"):
                ends = np.cumsum(arrays[f"{side}_lens"])
                sides.append(np.split(arrays[f"{side}_ids"], ends[:-1]))
            self._encoded[split] = (sides[0], sides[1])

    @property
    def tokenizer(self) -> TranslationTokenizer:
        self._load()
        return self._tokenizer

    @property
    def model_fields(self) -> dict:
        tok = self.tokenizer
        return {
            "src_vocab_size": tok.src_vocab_size,
            "tgt_vocab_size": tok.tgt_vocab_size,
            "pad_token_id": tok.pad_id,
            "bos_token_id": tok.bos_id,
            "eos_token_id": tok.eos_id,
            "max_len": self.hparams.max_length,
        }

    def texts(self, split: str) -> tuple[list[str], list[str]]:
        """The raw (source, target) sentences of a split, as read (references for BLEU)."""
        if split not in self._text:
            self._text[split] = read_parallel(*self.split_files(split))
        return self._text[split]

    def build_splits(self) -> None:
        self._load()

    def loader_batch_size(self, train: bool) -> None:
        return None  # the items are whole batches

    def train_dataset(self) -> TokenBatches:
        return self._dataset("train", seed=self.hparams.seed)

    def eval_dataset(self, split: str) -> TokenBatches:
        return self._dataset(split, seed=None)

    def _dataset(self, split: str, *, seed: int | None) -> TokenBatches:
        src, tgt = self._encoded[split]
        limit = self.hparams.max_length
        src_lens = np.array([len(x) for x in src])
        tgt_lens = np.array([len(y) + 1 for y in tgt])  # + BOS (inputs) / EOS (labels)
        too_long = (src_lens > limit) | (tgt_lens > limit)
        src_text = tgt_text = None
        if split == "train":
            keep = np.flatnonzero(~too_long)
            if too_long.any():
                message = f"train: dropped {int(too_long.sum())} pairs longer than max_length={limit} tokens"
                warnings.warn(message, stacklevel=2)
            src, tgt = [src[i] for i in keep], [tgt[i] for i in keep]
            src_lens, tgt_lens = src_lens[keep], tgt_lens[keep]
        else:
            if too_long.any():
                message = f"{split}: truncated {int(too_long.sum())} pairs longer than max_length={limit} tokens"
                warnings.warn(message, stacklevel=2)
                src = [x if len(x) <= limit else np.append(x[: limit - 1], EOS_ID) for x in src]
                tgt = [y[: limit - 1] for y in tgt]
                src_lens, tgt_lens = np.minimum(src_lens, limit), np.minimum(tgt_lens, limit)
            src_text, tgt_text = self.texts(split)
        batches = make_batches(src_lens, tgt_lens, self.per_device_batch_size, seed)
        return TokenBatches(src, tgt, batches, src_text, tgt_text)
