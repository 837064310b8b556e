"""Language-model DataModule: text -> tokenizer -> token shards (cached, zoo/data/prepare.py) -> windows of
block_size tokens read through memory maps, the same path as `data=token_shards`."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict
from pathlib import Path

from lightning.pytorch.utilities import rank_zero_info

from .prepare import PrepareOptions, prepare_shards, recorded_options
from .prepare_lock import prepare_once
from .token_shards import read_manifest, split_tokens
from .token_windows import TokenWindowsDataModule
from .tokenizer import load_tokenizer, published_tokenizer_files, tokenizer_from_json

log = logging.getLogger(__name__)

TOKENIZERS = ("char", "bpe")  # trained here on the training text; anything else is a path to a tokenizer
TOKENIZER_PATHS = (
    "a tokenizer.json, a directory holding tokenizer.json or vocab.json + merges.txt, or a zoo checkpoint (.ckpt)"
)


class LanguageModelDataModule(TokenWindowsDataModule):
    """Causal-LM data from a named dataset (`dataset="tinyshakespeare"`) or the user's own `text_files`. Without
    `val_files`, the joined text is split by position: the last `val_fraction` is validation (nanoGPT's 90/10). The
    test split is the validation split evaluated in full.

    The tokenizer: `char` or `bpe` (`bpe_vocab_size` tokens), trained on the text, or a path to a published one or
    to a zoo checkpoint (.ckpt). `pretrained` (following `model.pretrained`): a pretrained model whose own tokenizer
    replaces a `char` or `bpe` one; a path in `tokenizer` still wins.

    The splits are prepared once as token shards (zoo/data/prepare.py, split="position") in a cache folder keyed by
    the files' paths, sizes and modification times, the tokenizer and the options, and read through memory maps.
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
        self._splits: dict = {}  # split -> its tokens: a memory map of its shard (a TokenStream over several)

    def _files(self) -> tuple[list[Path], list[Path] | None]:
        hp = self.hparams
        if hp.dataset is not None:
            return self.dataset_files(hp.dataset), None
        train = [Path(p) for p in hp.text_files]
        val = [Path(p) for p in hp.val_files] if hp.val_files else None
        for path in train + (val or []):
            if not path.is_file():
                raise FileNotFoundError(
                    f"text file not found: {path.resolve()}; check data.text_files / data.val_files"
                )
        return train, val

    def _tokenizer_source(self) -> str | None:
        """The path the tokenizer is read from; None for a tokenizer trained on the text."""
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

    def _options(self) -> PrepareOptions:
        hp = self.hparams
        train, val = self._files()
        source = self._tokenizer_source()
        return PrepareOptions(
            tokenizer=hp.tokenizer if source is None else str(Path(source).resolve()),
            bpe_vocab_size=hp.bpe_vocab_size,
            val_fraction=hp.val_fraction,
            split="position",
            inputs={
                "train": [str(p.resolve()) for p in train],
                "val": None if val is None else [str(p.resolve()) for p in val],
            },
        )

    def _cache_key(self, options: PrepareOptions) -> str:
        """The files by path, size and modification time (hashing the text would cost what preparing costs), the
        options, and a given tokenizer by its JSON, not by where it was read from."""
        stats = {
            split: [(path, Path(path).stat().st_size, Path(path).stat().st_mtime_ns) for path in paths or []]
            for split, paths in options.inputs.items()
        }
        tokenizer = options.tokenizer
        if self._tokenizer_source() is not None:
            tokenizer = "given " + hashlib.sha256(self._given().to_json().encode()).hexdigest()
        identity = {**asdict(options), "inputs": stats, "tokenizer": tokenizer}
        return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]

    def _cache_folder(self, options: PrepareOptions | None = None) -> Path:
        options = options or self._options()
        name = self.hparams.dataset or Path(options.inputs["train"][0]).stem
        kind = self.hparams.tokenizer if self._tokenizer_source() is None else "given"
        return self.cache_dir / f"{name}-{kind}-{self._cache_key(options)}"

    def prepare_data(self) -> None:
        """Train the tokenizer and write the splits as shards once; later runs and other ranks reuse them."""
        options = self._options()
        folder = self._cache_folder(options)

        def make() -> None:
            progress = folder / "progress.json"
            if progress.is_file() and recorded_options(progress) != asdict(options):
                # Left by an interrupted run that read the same tokenizer from another path: start again.
                progress.unlink()
            given = self._given() if self._tokenizer_source() is not None else None
            keys = ("data.text_files", "data.val_files")
            if self.hparams.dataset is not None:
                keys = (f"dataset '{self.hparams.dataset}'",) * 2
            prepare_shards(options, folder, tokenizer=given, input_keys=keys, log=log.info)

        prepare_once(folder / "manifest.json", make, what="the encoded text")

    def _load(self) -> None:
        if self._tokenizer is not None:
            return
        self.prepare_data()
        folder = self._cache_folder()
        manifest = read_manifest(folder)
        self._tokenizer = tokenizer_from_json(manifest["tokenizer"])
        for split in ("train", "val"):
            self._splits[split] = split_tokens(folder, manifest, split)

    @property
    def tokenizer(self):
        self._load()
        return self._tokenizer

    def build_splits(self) -> None:
        self._load()

    def tokens(self, split: str):
        return self._splits[split]
