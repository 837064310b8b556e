"""The base of the zoo's DataModules: the shared options (seed, workers, data and cache directories, the global batch
and its per-device share) and the three loaders. A subclass declares its own options (the Hydra keys of
zoo/conf/data/*.yaml), passes the shared ones on as `**shared` to `super().__init__` first (all are recorded as
hyperparameters), and fills in `build_splits`, `train_dataset`, `eval_dataset`, where it differs `collate`,
`loader_batch_size` and `train_sampler`, and the contract the entry reads (`tokenizer`, `model_fields`,
`task_inputs`, `task`, `description`). Every batch unpacks as `inputs, targets = batch`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import lightning as L
from torch.utils.data import DataLoader, Dataset

from .resumable import resumable_sampler, seeded_loader
from .sources import data_dirs, resolve_dataset


def per_device_batch_size(global_batch: int, trainer=None, *, option: str = "batch_size", unit: str = "") -> int:
    """global_batch / (world_size x accumulate_grad_batches), never rounded. `option` names the config key in the
    error and `unit` what the batch counts when it is not rows (", in tokens")."""
    world, accumulate = 1, 1
    if trainer is not None:
        world, accumulate = trainer.world_size, trainer.accumulate_grad_batches
    share = world * accumulate
    if global_batch % share:
        raise ValueError(
            f"data.{option}={global_batch} (the global batch{unit}) is not divisible by "
            f"world_size {world} x accumulate_grad_batches {accumulate}; pick a multiple of {share}"
        )
    return global_batch // share


class ZooDataModule(L.LightningDataModule):
    """A DataModule of the zoo. The shared options: `seed` (training order, loader seeds), `num_workers`,
    `data_dir` / `cache_dir` (default ZOO_DATA_DIR or ./data, and ZOO_CACHE_DIR or <data_dir>/cache), `download`
    (whether a missing named dataset is fetched). The option named by `batch_option` is the global batch (counted
    in `batch_unit`); each device gets its share, `per_device_batch_size`."""

    # Every DataModule of zoo.data by "module.QualName": what a checkpoint may name as its data, and how eval.py
    # finds the data a task is evaluated on.
    registry: ClassVar[dict[str, type[ZooDataModule]]] = {}
    # The `task_name` of the zoo task this data is made for, and what the data is called in eval.py's refusal.
    task: ClassVar[str | None] = None
    description: ClassVar[str] = "a dataset"
    batch_option: ClassVar[str] = "batch_size"
    batch_unit: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        # Only zoo's own classes that serve a task: a checkpoint never names the user's code.
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
        self.save_hyperparameters()  # the subclass's arguments too: eval.py rebuilds the data from them
        self.seed, self.num_workers, self.download = seed, num_workers, download
        self.data_dir, self.cache_dir = data_dirs(data_dir, cache_dir)
        self.global_batch = self.hparams[self.batch_option]
        # Until `setup` knows the trainer, a device's share is the whole batch (one device, no accumulation).
        self.per_device_batch_size = self.global_batch

    def dataset_files(self, name: str):
        """The local paths of a named dataset (zoo.data.sources), fetched as `download` allows."""
        return resolve_dataset(name, self.data_dir, download_missing=self.download, cache_dir=self.cache_dir)

    @property
    def tokenizer(self):
        """The text's tokenizer, or None for data without text."""
        return None

    @property
    def model_fields(self) -> dict:
        """Fields of the model's config that the data determines (vocab_size, num_classes, ...)."""
        return {}

    @property
    def task_inputs(self) -> dict:
        """Arguments of the task that come from the data besides batches: the tokenizer, where there is one."""
        tokenizer = self.tokenizer
        return {} if tokenizer is None else {"tokenizer": tokenizer}

    def build_splits(self) -> None:
        """Read, tokenize and split the data; called by every `setup`, so it returns at once when done."""

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

    def setup(self, stage: str | None = None) -> None:
        self.per_device_batch_size = per_device_batch_size(
            self.global_batch, self.trainer, option=self.batch_option, unit=self.batch_unit
        )
        self.build_splits()

    def train_dataloader(self) -> DataLoader:
        dataset, batch = self.train_dataset(), self.loader_batch_size(train=True)
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
