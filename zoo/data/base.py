"""The base of the zoo's DataModules: what all of them do the same way, and what the entry reads from them.

The base owns the shared options (seed, workers, the data and cache directories, the global batch and its
per-device share) and the three loaders. A DataModule built on it says only what is its own:

- `build_splits()`: read, tokenize and split the data (called by `setup`, once the per-device batch is known);
- `train_dataset()` and `eval_dataset(split)`: what the loaders serve;
- where it differs, `collate(train)`, `loader_batch_size(train)` and `train_sampler(dataset, batch)`;
- the contract the entry reads (`tokenizer`, `model_fields`, `task_inputs`) and, for eval.py, `task` and
  `description`.

Every batch unpacks as `inputs, targets = batch`: a pair, or a dataclass with named fields (zoo.data.batches).

A subclass's `__init__` declares its own options (the Hydra keys of zoo/conf/data/*.yaml) and passes the shared
ones on as `**shared`, to `super().__init__` before anything else: the base records all of them as the
hyperparameters a checkpoint keeps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import lightning as L
from torch.utils.data import DataLoader, Dataset

from .batching import per_device_batch_size
from .resumable import resumable_sampler, seeded_loader
from .sources import data_dirs, resolve_dataset


class ZooDataModule(L.LightningDataModule):
    """A DataModule of the zoo (see the module docstring for what a subclass fills in).

    The shared options: `seed` (the training order and the loaders' worker seeds), `num_workers` (loader
    processes, kept alive between epochs), `data_dir` / `cache_dir` (default ZOO_DATA_DIR or ./data, and
    ZOO_CACHE_DIR or <data_dir>/cache), `download` (whether a missing named dataset is fetched).

    The subclass's option named by `batch_option` is the global batch (counted in `batch_unit`); each device gets
    batch / (world_size x accumulate_grad_batches), in `per_device_batch_size`. Training items are shuffled by
    `seed` and position alone, so that a run resumed from a checkpoint continues exactly where it stopped.
    """

    # Every DataModule of zoo.data by "module.QualName": the allow-list of what a checkpoint may name as its data
    # (zoo/entry/recorded_data.py), and how eval.py finds the data a task is evaluated on.
    registry: ClassVar[dict[str, type[ZooDataModule]]] = {}
    # The `task_name` of the zoo task this data is made for (eval.py refuses data made for another task), and what
    # the data is called in that error ("a translation dataset").
    task: ClassVar[str | None] = None
    description: ClassVar[str] = "a dataset"
    # The config key of the global batch and what it counts, for the error when devices cannot share it.
    batch_option: ClassVar[str] = "batch_size"
    batch_unit: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        # Only zoo's own classes that serve a task: a subclass defined elsewhere is the user's code, which a config
        # names, never a checkpoint; one without a task is a base for others.
        if cls.__module__.startswith("zoo.data.") and cls.task is not None:
            ZooDataModule.registry[f"{cls.__module__}.{cls.__qualname__}"] = cls

    def __init__(
        self,
        *,
        seed: int = 0,
        num_workers: int = 0,
        data_dir: str | None = None,
        cache_dir: str | None = None,
        download: bool | str = False,  # or "auto" (the configs' default): see zoo.data.sources
    ) -> None:
        super().__init__()
        # Lightning collects the arguments of every __init__ in the chain, so the subclass's are recorded with
        # these: the checkpoint keeps them all, and eval.py rebuilds the data from them.
        self.save_hyperparameters()
        self.seed, self.num_workers, self.download = seed, num_workers, download
        self.data_dir, self.cache_dir = data_dirs(data_dir, cache_dir)
        self.global_batch = self.hparams[self.batch_option]
        # Until `setup` knows the trainer, a device's share is the whole batch (one device, no accumulation).
        self.per_device_batch_size = self.global_batch

    def dataset_files(self, name: str):
        """The local paths of a named dataset (zoo.data.sources), fetched as `download` allows."""
        return resolve_dataset(name, self.data_dir, download_missing=self.download, cache_dir=self.cache_dir)

    # ---- the contract the entry reads (zoo/entry/builders.py, train.py, evaluate.py) ---------------------------
    @property
    def tokenizer(self):
        """The text's tokenizer, or None for data without text. The task decodes samples with it, the
        checkpoint stores it, and eval.py refuses data whose tokenizer differs from the stored one."""
        return None

    @property
    def model_fields(self) -> dict:
        """Fields of the model's config that the data determines (vocab_size, num_classes, ...): the entry fills
        them into `model.net` where the config leaves them null and refuses a config that disagrees."""
        return {}

    @property
    def task_inputs(self) -> dict:
        """Arguments of the task that come from the data besides batches: the tokenizer, where there is one."""
        tokenizer = self.tokenizer
        return {} if tokenizer is None else {"tokenizer": tokenizer}

    # ---- what a subclass fills in --------------------------------------------------------------------------------
    def build_splits(self) -> None:
        """Read, tokenize and split the data; called by every `setup`, so it returns at once when done. Nothing
        by default, for data that is read lazily."""

    def train_dataset(self) -> Dataset:
        raise NotImplementedError

    def eval_dataset(self, split: str) -> Dataset:
        """The "val" or "test" split, in its own fixed order."""
        raise NotImplementedError

    def collate(self, train: bool) -> Callable | None:
        """How a list of items becomes a batch (None: torch's default)."""
        return None

    def loader_batch_size(self, train: bool) -> int | None:
        """Items per loader batch; None when the items are whole batches already."""
        return self.per_device_batch_size

    def train_sampler(self, dataset, batch: int):
        """The training order: shuffled by seed and position, placed after the steps a resumed run has taken."""
        return resumable_sampler(dataset, seed=self.seed, trainer=self.trainer, batch_size=batch)

    # ---- Lightning hooks -------------------------------------------------------------------------------------------
    def setup(self, stage: str | None = None) -> None:
        self.per_device_batch_size = per_device_batch_size(
            self.global_batch, self.trainer, option=self.batch_option, unit=self.batch_unit
        )
        self.build_splits()

    def train_dataloader(self) -> DataLoader:
        dataset, batch = self.train_dataset(), self.loader_batch_size(train=True)
        # A dataset of whole batches takes one item per step.
        sampler = self.train_sampler(dataset, batch or 1)
        return self._loader(dataset, batch, train=True, sampler=sampler)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.eval_dataset("val"), self.loader_batch_size(train=False), train=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.eval_dataset("test"), self.loader_batch_size(train=False), train=False)

    def _loader(self, dataset, batch: int | None, *, train: bool, sampler=None) -> DataLoader:
        return seeded_loader(
            dataset,
            sampler=sampler,
            batch_size=batch,
            seed=self.seed,
            num_workers=self.num_workers,
            collate_fn=self.collate(train),
        )
