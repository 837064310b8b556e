"""Language-model training from the token shards `zoo-prepare` made (zoo/data/prepare.py), memory-mapped and read
as one token stream per split. Nothing at start-up grows with the corpus: the manifest's token counts are checked
against the files' sizes (`verify=true` also checks every sha256), and the training order is computed per window.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from .counter_shuffle import CounterShuffle
from .prepare import FORMAT
from .resumable import resumable_sampler
from .token_windows import TokenWindowsDataModule
from .tokenizer import tokenizer_from_json
from .windows import RandomWindows


class TokenStream:
    """The shards of one split as one sequence of tokens: `len()` and slices `[a:b]` (what the windows read)."""

    def __init__(self, files: list[Path], counts: list[int], dtype: str) -> None:
        self.maps = [np.memmap(f, dtype=dtype, mode="r") for f in files]
        self.ends = np.cumsum(counts)
        self.dtype = np.dtype(dtype)

    def __len__(self) -> int:
        return int(self.ends[-1]) if len(self.ends) else 0

    def __getitem__(self, item: slice) -> np.ndarray:
        start, stop, _ = item.indices(len(self))
        first = int(np.searchsorted(self.ends, start, side="right"))
        pieces, position = [], start
        for index in range(first, len(self.maps)):
            begin = int(self.ends[index - 1]) if index else 0
            pieces.append(self.maps[index][position - begin : stop - begin])
            position = min(stop, int(self.ends[index]))
            if position >= stop:
                break
        return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        # np.asarray: every shard, read into memory (the lab's n-gram references).
        whole = self[:]
        return whole if dtype is None else whole.astype(dtype)


def split_tokens(directory: Path, manifest: dict, split: str) -> np.ndarray | TokenStream:
    """The tokens of one split of the shards in `directory`: the shard's memory map when the split is one shard,
    else a TokenStream over all of them."""
    shards = manifest["shards"][split]
    files = [directory / s["file"] for s in shards]
    if len(files) == 1:
        return np.memmap(files[0], dtype=manifest["dtype"], mode="r")
    return TokenStream(files, [s["tokens"] for s in shards], manifest["dtype"])


def read_manifest(directory: Path, *, verify: bool = False) -> dict:
    path = directory / "manifest.json"
    if not path.is_file():
        partial = (
            " (an interrupted zoo-prepare: run it again to finish)" if (directory / "progress.json").is_file() else ""
        )
        raise FileNotFoundError(
            f"no manifest.json in {directory.resolve()}{partial}; make the shards with zoo-prepare ... "
            f"prepare.output_dir={directory}"
        )
    manifest = json.loads(path.read_text())
    if manifest.get("format") != FORMAT:
        raise ValueError(f"{path} is not a manifest of zoo-prepare ({FORMAT}); make the shards again")
    itemsize = np.dtype(manifest["dtype"]).itemsize
    for shards in manifest["shards"].values():
        for shard in shards:
            file = directory / shard["file"]
            if not file.is_file() or file.stat().st_size != shard["tokens"] * itemsize:
                raise ValueError(
                    f"{file} is missing or not the size its manifest records ({shard['tokens']} tokens); the shards "
                    "are incomplete or damaged: make them again with zoo-prepare"
                )
            if verify and hashlib.sha256(file.read_bytes()).hexdigest() != shard["sha256"]:
                raise ValueError(f"{file} does not match its sha256 in the manifest; make the shards again")
    return manifest


class TokenShardsDataModule(TokenWindowsDataModule):
    """Causal-LM data from zoo-prepare's shards: `python train.py data=token_shards data.shards=DIR`."""

    task, description = "causal_lm", "a language-model text dataset"

    def __init__(
        self,
        shards: str,
        block_size: int = 64,
        batch_size: int = 12,
        val_seed: int = 0,
        verify: bool = False,
        **shared,
    ) -> None:
        super().__init__(**shared)
        if block_size <= 0 or batch_size <= 0:
            raise ValueError(f"block_size ({block_size}) and batch_size ({batch_size}) must be positive")
        self.directory = Path(shards)
        self.manifest = read_manifest(self.directory, verify=verify)
        self._tokenizer = tokenizer_from_json(self.manifest["tokenizer"])
        self._streams: dict[str, np.ndarray | TokenStream] = {}

    @property
    def tokenizer(self):
        return self._tokenizer

    def tokens(self, split: str) -> np.ndarray | TokenStream:
        if split not in self._streams:
            self._streams[split] = split_tokens(self.directory, self.manifest, split)
        return self._streams[split]

    def train_sampler(self, dataset: RandomWindows, batch: int) -> CounterShuffle:
        # A computed order: a list of every window's index would grow with the corpus.
        return resumable_sampler(dataset, seed=self.seed, trainer=self.trainer, batch_size=batch, kind=CounterShuffle)
