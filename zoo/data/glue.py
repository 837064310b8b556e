"""Sentence(-pair) classification from GLUE-style TSV files: SST-2 by default, pairs (MRPC, QNLI, RTE, ...) too.

GLUE TSVs have a header line and no quoting, so each line is split on tabs as is. The text columns are found from
the header or given; labels are integers, or names mapped to ids in sorted order.
"""

from __future__ import annotations

import functools
import hashlib
import random
from pathlib import Path

import torch

from .base import ZooDataModule
from .batches import PAD_TO, EncoderBatch, pad_encoder_items
from .bert_pretraining import PairDataset
from .resumable import ResumableShuffle, resumable_sampler
from .text import decode_utf8
from .wordpiece import WordPieceTokenizer, cached_wordpiece, tokenizer_from_source

# Header columns that hold the text, tried in order: one column is a single sentence, two are a pair.
TEXT_COLUMNS = (("sentence1", "sentence2"), ("question1", "question2"), ("question", "sentence"), ("sentence",))


def read_tsv(path: Path, label_column: str | None, text_columns: list[str] | None) -> tuple[list[tuple], list[str]]:
    """Rows of (texts..., label) from a headed TSV; label is None when label_column is None."""
    lines = decode_utf8(path.read_bytes(), path, "data.train_file / val_file / test_file").splitlines()
    if not lines:
        raise ValueError(f"{path} is empty; a GLUE TSV starts with a header line such as 'sentence\\tlabel'")
    header = lines[0].split("\t")
    if text_columns is None:
        text_columns = next((list(c) for c in TEXT_COLUMNS if all(name in header for name in c)), None)
        if text_columns is None:
            raise ValueError(
                f"{path}: no header with a text column (found {header}); a GLUE TSV starts with a header line such "
                "as 'sentence\\tlabel', or name the columns with data.text_columns"
            )
    wanted = list(text_columns) + ([label_column] if label_column else [])
    for name in wanted:
        if name not in header:
            what = "label" if name == label_column else "text"
            raise ValueError(
                f"{path}: the header has no {what} column '{name}' (found {header}); a GLUE TSV starts with a header "
                "line such as 'sentence\\tlabel' (GLUE test files have no labels: evaluate on dev.tsv)"
            )
    index = [header.index(name) for name in wanted]
    rows = []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != len(header):
            raise ValueError(f"{path}, line {number}: {len(fields)} tab-separated fields, the header has {len(header)}")
        rows.append(tuple(fields[i].strip() for i in index))
    if not rows:
        raise ValueError(f"{path} has a header but no rows")
    return rows, list(text_columns)


def truncate_longest_first(a: list[int], b: list[int] | None, max_tokens: int) -> None:
    """Drop tokens from the end of the longer segment until both fit (in place; Hugging Face's 'longest_first')."""
    while len(a) + (len(b) if b is not None else 0) > max_tokens:
        (b if b is not None and len(b) > len(a) else a).pop()


class ClassificationCollator:
    def __init__(self, pad_id: int, *, block_size: int, pad_to: str) -> None:
        self.pad_id, self.block_size, self.pad_to = pad_id, block_size, pad_to

    def __call__(self, items: list[dict]) -> EncoderBatch:
        padded = pad_encoder_items(items, self.pad_id, self.pad_to, self.block_size)[:3]
        return EncoderBatch(*padded, labels=torch.tensor([it["label"] for it in items], dtype=torch.long))


class LengthGroupedSampler(ResumableShuffle):
    """Random batches of rows of similar length, so that padding to the longest row wastes little: shuffle, sort
    groups of 50 batches by length, cut them into batches and shuffle the batch order (per seed and epoch). The
    batches are global ones (batch_size x world_size rows), rank r taking rows r, r+W, ...; a partial batch comes
    last, where drop_last drops it."""

    def __init__(
        self, lengths: list[int], batch_size: int, seed: int = 0, *, rank: int = 0, world_size: int = 1
    ) -> None:
        super().__init__(lengths, seed=seed, rank=rank, world_size=world_size)
        self.lengths, self.batch_size = lengths, batch_size

    def order(self, generator: torch.Generator) -> list[int]:
        order = torch.randperm(len(self.lengths), generator=generator).tolist()
        size = self.batch_size * self.num_replicas
        group = 50 * size
        batches = []
        for start in range(0, len(order), group):
            chunk = sorted(order[start : start + group], key=self.lengths.__getitem__, reverse=True)
            batches += [chunk[i : i + size] for i in range(0, len(chunk), size)]
        full = [b for b in batches if len(b) == size]
        partial = [b for b in batches if len(b) < size]
        shuffled = [full[i] for i in torch.randperm(len(full), generator=generator).tolist()]
        return [i for batch in shuffled + partial for i in batch]


class GlueDataModule(ZooDataModule):
    """Classification of sentences or sentence pairs from TSV files (paths relative to the data folder unless
    absolute). The tokenizer comes from `pretrained` (a Hugging Face BERT directory or a zoo .ckpt), else from
    `vocab_file`, else a WordPiece trained on the training sentences (cached). Without `test_file` the test split is
    the validation file (GLUE's test labels are hidden). `pad_to="longest"` with `group_by_length=true` batches rows
    of similar length: SST-2 trains ~2.5x faster.
    """

    task, description = "sequence_classification", "a sentence-classification (GLUE) dataset"

    def __init__(
        self,
        train_file: str = "sst2/train.tsv",
        val_file: str = "sst2/dev.tsv",
        test_file: str | None = None,
        dataset: str | None = "sst2",
        text_columns: list[str] | None = None,
        label_column: str = "label",
        pretrained: str | None = None,
        vocab_file: str | None = None,
        vocab_size: int = 8192,
        lowercase: bool = True,
        block_size: int = 64,
        batch_size: int = 32,
        pad_to: str = "max_length",
        group_by_length: bool = False,
        max_train_rows: int | None = None,
        max_val_rows: int | None = None,
        **shared,
    ) -> None:
        super().__init__(**shared)
        if pad_to not in PAD_TO:
            raise ValueError(f"unknown pad_to '{pad_to}'; choose one of {', '.join(PAD_TO)}")
        if block_size < 3 or batch_size <= 0:
            raise ValueError(f"need block_size >= 3 (got {block_size}) and batch_size > 0 (got {batch_size})")
        self._tokenizer: WordPieceTokenizer | None = None
        self._rows: dict[str, list[tuple]] = {}
        self._datasets: dict[str, PairDataset] = {}
        self.label_names: list[str] | None = None

    def _path(self, name: str) -> Path:
        path = self.data_dir / name  # an absolute path stays itself
        if not path.is_file():
            raise FileNotFoundError(
                f"TSV file not found: {path.resolve()}; check data.train_file / data.val_file "
                f"(relative paths are below the data folder {self.data_dir}, set by ZOO_DATA_DIR)"
            )
        return path

    def _load_rows(self) -> None:
        if self._rows:
            return
        hp = self.hparams
        if hp.dataset is not None:
            self.dataset_files(hp.dataset)  # fetched (or checked) before the files are read
        columns = hp.text_columns
        files = {"train": hp.train_file, "val": hp.val_file, "test": hp.test_file or hp.val_file}
        rows = {}
        for split, name in files.items():
            rows[split], columns = read_tsv(self._path(name), hp.label_column, columns)
        self.text_columns = columns
        labels = sorted({r[-1] for r in rows["train"]})
        if all(label.lstrip("-").isdigit() for label in labels):
            to_id = {label: int(label) for label in labels}
            self.num_labels = max(to_id.values()) + 1
        else:
            self.label_names = labels
            to_id = {label: i for i, label in enumerate(labels)}
            self.num_labels = len(labels)
        for split, split_rows in rows.items():
            unknown = {r[-1] for r in split_rows} - set(to_id)
            if unknown:
                raise ValueError(f"{files[split]}: labels {sorted(unknown)} do not occur in the training file")
            self._rows[split] = [(*r[:-1], to_id[r[-1]]) for r in split_rows]
        for split, limit, seed in (("train", hp.max_train_rows, hp.seed), ("val", hp.max_val_rows, hp.seed + 1)):
            if limit is not None and limit < len(self._rows[split]):
                self._rows[split] = random.Random(seed).sample(self._rows[split], limit)

    def prepare_data(self) -> None:
        self._load_rows()
        _ = self.tokenizer  # trained once and cached, or read

    @property
    def tokenizer(self) -> WordPieceTokenizer:
        if self._tokenizer is None:
            hp = self.hparams
            if hp.pretrained is not None:
                self._tokenizer = tokenizer_from_source(hp.pretrained)
            elif hp.vocab_file is not None:
                self._tokenizer = WordPieceTokenizer.from_vocab_file(
                    self.data_dir / hp.vocab_file, lowercase=hp.lowercase
                )
            else:
                self._load_rows()
                train = self._path(hp.train_file)
                key = [hashlib.sha256(train.read_bytes()).hexdigest(), hp.max_train_rows, hp.seed, self.text_columns]
                texts = lambda: (" ".join(r[:-1]) for r in self._rows["train"])
                name = train.parent.name
                self._tokenizer = cached_wordpiece(self.cache_dir, name, key, texts, hp.vocab_size, hp.lowercase)
        return self._tokenizer

    @property
    def model_fields(self) -> dict:
        self._load_rows()
        return {
            "vocab_size": self.tokenizer.vocab_size,
            "pad_token_id": self.tokenizer.pad_id,
            "num_labels": self.num_labels,
        }

    def _items(self, rows: list[tuple]) -> list[dict]:
        tok = self.tokenizer
        columns = [tok.encode_batch([r[i] for r in rows]) for i in range(len(rows[0]) - 1)]
        items = []
        for k, row in enumerate(rows):
            a = columns[0][k]
            b = columns[1][k] if len(columns) > 1 else None
            truncate_longest_first(a, b, self.hparams.block_size - (3 if b is not None else 2))
            ids, segments = tok.build_pair(a, b)
            items.append({"input_ids": ids, "token_type_ids": segments, "label": row[-1]})
        return items

    def build_splits(self) -> None:
        self._load_rows()
        for split in ("train", "val", "test"):
            if split not in self._datasets:
                self._datasets[split] = PairDataset(self._items(self._rows[split]))

    def train_dataset(self) -> PairDataset:
        return self._datasets["train"]

    def eval_dataset(self, split: str) -> PairDataset:
        return self._datasets[split]

    def collate(self, train: bool) -> ClassificationCollator:
        return ClassificationCollator(
            self.tokenizer.pad_id, block_size=self.hparams.block_size, pad_to=self.hparams.pad_to
        )

    def train_sampler(self, dataset: PairDataset, batch: int):
        if not self.hparams.group_by_length:
            return super().train_sampler(dataset, batch)
        lengths = [len(item["input_ids"]) for item in dataset.items]
        kind = functools.partial(LengthGroupedSampler, batch_size=batch)
        return resumable_sampler(lengths, seed=self.seed, trainer=self.trainer, batch_size=batch, kind=kind)
