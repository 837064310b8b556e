"""Language-model DataModule: text -> tokenizer -> token memmaps (cached) -> windows of block_size tokens."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
from lightning.pytorch.utilities import rank_zero_info

from .atomic import atomic_write
from .base import ZooDataModule
from .prepare_lock import prepare_once
from .text import read_text_file
from .tokenizer import BPETokenizer, CharTokenizer, load_tokenizer, published_tokenizer_files, tokenizer_from_json
from .windows import DisjointWindows, RandomWindows

TOKENIZERS = ("char", "bpe")  # trained here on the training text; anything else is a path to a tokenizer
TOKENIZER_PATHS = (
    "a tokenizer.json, a directory holding tokenizer.json or vocab.json + merges.txt, or a zoo checkpoint (.ckpt)"
)


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
        return RandomWindows(self.tokens("train"), self.hparams.block_size)

    def eval_dataset(self, split: str) -> DisjointWindows:
        # Validation's windows come in a fixed shuffled order, so that limit_val_batches scores a spread-out sample.
        seed = self.hparams.val_seed if split == "val" else None
        return DisjointWindows(self.tokens("val"), self.hparams.block_size, seed=seed)


class LanguageModelDataModule(TokenWindowsDataModule):
    """Causal-LM data.

    The text is a named dataset (`dataset="tinyshakespeare"`) or the user's own `text_files`. Without
    `val_files`, the concatenated text is split by position: the first (1 - val_fraction) for training, the
    rest for validation (nanoGPT's 90/10). The test split is the validation split evaluated in full.

    The tokenizer: `char` or `bpe` (`bpe_vocab_size` tokens), trained on the text, or a path to a published one
    (a tokenizer.json, a directory holding tokenizer.json or vocab.json + merges.txt) or to a zoo checkpoint
    (.ckpt), whose stored tokenizer is used. `pretrained` (the configs make it follow `model.pretrained`): a
    pretrained model (a Hugging Face directory or a zoo .ckpt) whose own tokenizer replaces a `char` or `bpe` one,
    since a tokenizer trained here could never give the model's ids; a path in `tokenizer` still wins. Encoded
    splits are cached by text, tokenizer and options (a published tokenizer by a hash of its JSON).

    `batch_size` is the global batch; it and the shared options (seed, workers, folders) are ZooDataModule's.
    """

    task, description = "causal_lm", "a language-model text dataset"

    def __init__(
        self,
        dataset: str | None = "tinyshakespeare",
        text_files: list[str] | None = None,
        val_files: list[str] | None = None,
        tokenizer: str = "char",
        pretrained: str | None = None,
        bpe_vocab_size: int = 2048,
        block_size: int = 64,
        batch_size: int = 12,
        val_fraction: float = 0.1,
        val_seed: int = 0,
        **shared,
    ) -> None:
        super().__init__(**shared)
        if tokenizer not in TOKENIZERS and not Path(tokenizer).exists():
            raise ValueError(
                f"unknown tokenizer '{tokenizer}': give {' or '.join(TOKENIZERS)} (trained on the text), or the path "
                f"of {TOKENIZER_PATHS}; {Path(tokenizer).resolve()} does not exist"
            )
        if (dataset is None) == (text_files is None):
            raise ValueError("give exactly one of data.dataset (a named dataset) or data.text_files (your own files)")
        if val_files is not None and text_files is None:
            raise ValueError("data.val_files needs data.text_files for the training text")
        if not 0.0 < val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
        if block_size <= 0 or batch_size <= 0:
            raise ValueError(f"block_size ({block_size}) and batch_size ({batch_size}) must be positive")
        self._tokenizer = None
        self._given_tokenizer = None  # a published or stored tokenizer, read once
        self._splits: dict[str, np.ndarray] = {}

    # ---- text ------------------------------------------------------------------------------------------------
    def _files(self) -> tuple[list[Path], list[Path] | None]:
        hp = self.hparams
        if hp.dataset is not None:
            # A shipped dataset (tiny shakespeare) missing from the data folder is decompressed into the cache.
            return self.dataset_files(hp.dataset), None
        train = [Path(p) for p in hp.text_files]
        val = [Path(p) for p in hp.val_files] if hp.val_files else None
        for path in train + (val or []):
            if not path.is_file():
                raise FileNotFoundError(
                    f"text file not found: {path.resolve()}; check data.text_files / data.val_files"
                )
        return train, val

    def _read(self, paths: list[Path], key: str) -> str:
        if self.hparams.dataset is not None:
            key = f"dataset '{self.hparams.dataset}'"
        return "\n".join(read_text_file(p, key) for p in paths)

    # ---- a tokenizer that is given, not trained ----------------------------------------------------------------
    def _tokenizer_source(self) -> str | None:
        """The path the tokenizer is read from: `tokenizer` when it is one, else the pretrained model's when there
        is one; None for a tokenizer trained on the text."""
        hp = self.hparams
        if hp.tokenizer not in TOKENIZERS:
            return hp.tokenizer
        return hp.pretrained

    def _given(self):
        """The tokenizer read from `_tokenizer_source()`, once."""
        if self._given_tokenizer is not None:
            return self._given_tokenizer
        hp = self.hparams
        if hp.tokenizer not in TOKENIZERS:
            try:
                self._given_tokenizer = load_tokenizer(hp.tokenizer)
            except (ValueError, FileNotFoundError) as error:
                raise type(error)(f"data.tokenizer={hp.tokenizer}: {error}") from None
            return self._given_tokenizer
        path = Path(hp.pretrained)
        if not path.exists():
            raise FileNotFoundError(
                f"pretrained model not found: {path.resolve()}; check model.pretrained (data.pretrained follows it)"
            )
        if path.is_dir() and not published_tokenizer_files(path):
            raise FileNotFoundError(
                f"the pretrained model {path} holds no tokenizer (no tokenizer.json, nor vocab.json + merges.txt); "
                "give the model's tokenizer with data.tokenizer=<its tokenizer.json or directory>"
            )
        self._given_tokenizer = load_tokenizer(path)
        rank_zero_info(f"tokenizer of {path} (data.pretrained), not a {hp.tokenizer} tokenizer trained on the text")
        return self._given_tokenizer

    # ---- text and cache --------------------------------------------------------------------------------------
    def _cache_key(self, train: list[Path], val: list[Path] | None) -> str:
        hp = self.hparams
        digest = hashlib.sha256()
        for path in train + [Path("--val--")] + (val or []):
            digest.update(path.name.encode())
            if path.is_file():
                digest.update(path.read_bytes())
        if self._tokenizer_source() is None:
            digest.update(json.dumps([hp.tokenizer, hp.bpe_vocab_size, hp.val_fraction]).encode())
        else:  # the tokenizer's identity: its whole JSON (vocabulary, merges, normalization, special tokens)
            identity = hashlib.sha256(self._given().to_json().encode()).hexdigest()
            digest.update(json.dumps(["given", identity, hp.val_fraction]).encode())
        return digest.hexdigest()[:16]

    def _cache_folder(self) -> Path:
        train, val = self._files()
        name = self.hparams.dataset or train[0].stem
        kind = self.hparams.tokenizer if self._tokenizer_source() is None else "given"
        return self.cache_dir / f"{name}-{kind}-{self._cache_key(train, val)}"

    def prepare_data(self) -> None:
        """Train the tokenizer and encode the splits once; later runs, and the other processes of a DDP job (which
        wait while one prepares: zoo/data/prepare_lock.py), reuse the cached files."""
        folder = self._cache_folder()
        prepare_once(folder / "meta.json", lambda: self._encode_into(folder), what="the encoded text")

    def _encode_into(self, folder: Path) -> None:
        train_files, val_files = self._files()
        text = self._read(train_files, "data.text_files")
        if val_files is None:
            cut = int(len(text) * (1 - self.hparams.val_fraction))
            train_text, val_text = text[:cut], text[cut:]
        else:
            train_text, val_text = text, self._read(val_files, "data.val_files")
        if self._tokenizer_source() is not None:
            tokenizer = self._given()
        elif self.hparams.tokenizer == "char":
            tokenizer = CharTokenizer.train(train_text + val_text)
        else:
            tokenizer = BPETokenizer.train(train_text, self.hparams.bpe_vocab_size)
        dtype = np.uint16 if tokenizer.vocab_size < 2**16 else np.uint32
        folder.mkdir(parents=True, exist_ok=True)
        for split, split_text in (("train", train_text), ("val", val_text)):
            ids = np.array(tokenizer.encode(split_text), dtype=dtype)
            atomic_write(folder / f"{split}.bin", ids.tobytes())
        meta = {"dtype": np.dtype(dtype).name, "tokenizer": tokenizer.to_json()}
        atomic_write(folder / "meta.json", json.dumps(meta).encode())  # written last: marks the cache complete

    def _load(self) -> None:
        if self._tokenizer is not None:
            return
        self.prepare_data()
        folder = self._cache_folder()
        meta = json.loads((folder / "meta.json").read_text())
        self._tokenizer = tokenizer_from_json(meta["tokenizer"])
        for split in ("train", "val"):
            path = folder / f"{split}.bin"
            if path.stat().st_size == 0:  # np.memmap would say only "cannot mmap an empty file"
                source = self.hparams.dataset or ", ".join(self.hparams.text_files)
                raise ValueError(
                    f"the {split} split of {source} has no tokens; give more text (or a larger data.val_fraction, "
                    "or data.val_files)"
                )
            self._splits[split] = np.memmap(path, dtype=meta["dtype"], mode="r")

    @property
    def tokenizer(self):
        self._load()
        return self._tokenizer

    # ---- what the loaders serve --------------------------------------------------------------------------------
    def build_splits(self) -> None:
        self._load()

    def tokens(self, split: str) -> np.ndarray:
        return self._splits[split]
