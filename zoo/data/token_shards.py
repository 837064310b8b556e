"""Language-model training from the token shards `zoo-prepare` made (zoo/data/prepare.py).

The shards are memory-mapped and read as one token stream per split: a window may span two shards. Nothing at
start-up grows with the corpus: the manifest names the shards and their token counts (checked against the files'
sizes; `verify=true` also checks every shard's sha256, which reads them all), the training order is a keyed
permutation computed per window (zoo/data/counter_shuffle.py), and the tokenizer is the one the shards were
encoded with, stored in the manifest.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader

from .batching import per_device_batch_size
from .counter_shuffle import CounterShuffle
from .prepare import FORMAT
from .resumable import check_fills_a_batch
from .tokenizer import tokenizer_from_json
from .windows import DisjointWindows, RandomWindows


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


class TokenShardsDataModule(L.LightningDataModule):
    """Causal-LM data from zoo-prepare's shards: `python train.py data=token_shards data.shards=DIR`.

    `batch_size` is the global batch. Training windows start at every offset of the training stream, in a
    keyed order that resumes exactly; validation reads disjoint windows of the validation stream."""

    def __init__(
        self,
        shards: str,
        block_size: int = 64,
        batch_size: int = 12,
        val_seed: int = 0,
        num_workers: int = 0,
        verify: bool = False,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        if block_size <= 0 or batch_size <= 0:
            raise ValueError(f"block_size ({block_size}) and batch_size ({batch_size}) must be positive")
        self.directory = Path(shards)
        self.manifest = read_manifest(self.directory, verify=verify)
        self.tokenizer = tokenizer_from_json(self.manifest["tokenizer"])
        self._streams: dict[str, TokenStream] = {}
        self.per_device_batch_size = batch_size

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    @property
    def model_fields(self) -> dict:
        """Model config fields this data determines (filled into `model.net` by train.py)."""
        return {"vocab_size": self.vocab_size}

    @property
    def task_inputs(self) -> dict:
        return {"tokenizer": self.tokenizer}

    def stream(self, split: str) -> TokenStream:
        if split not in self._streams:
            shards = self.manifest["shards"][split]
            files = [self.directory / s["file"] for s in shards]
            self._streams[split] = TokenStream(files, [s["tokens"] for s in shards], self.manifest["dtype"])
        return self._streams[split]

    def setup(self, stage: str | None = None) -> None:
        self.per_device_batch_size = per_device_batch_size(self.hparams.batch_size, self.trainer)

    def _loader(self, dataset, sampler=None) -> DataLoader:
        return DataLoader(
            dataset,
            batch_size=self.per_device_batch_size,
            sampler=sampler,
            num_workers=self.hparams.num_workers,
            persistent_workers=self.hparams.num_workers > 0,
            drop_last=sampler is not None,
            generator=torch.Generator().manual_seed(self.hparams.seed),  # see LanguageModelDataModule._loader
        )

    def train_dataloader(self) -> DataLoader:
        windows = RandomWindows(self.stream("train"), self.hparams.block_size)
        rank, world, step, accumulate = 0, 1, 0, 1
        if self.trainer is not None:
            rank, world = self.trainer.global_rank, self.trainer.world_size
            step, accumulate = self.trainer.global_step, self.trainer.accumulate_grad_batches
        sampler = CounterShuffle(windows, seed=self.hparams.seed, rank=rank, world_size=world)
        check_fills_a_batch(sampler, self.per_device_batch_size, accumulate=accumulate)
        sampler.set_position(step * accumulate * self.per_device_batch_size)
        return self._loader(windows, sampler)

    def val_dataloader(self) -> DataLoader:
        return self._loader(DisjointWindows(self.stream("val"), self.hparams.block_size, seed=self.hparams.val_seed))

    def test_dataloader(self) -> DataLoader:
        return self._loader(DisjointWindows(self.stream("val"), self.hparams.block_size))
