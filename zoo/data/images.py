"""Image-classification DataModule: MNIST, CIFAR-10 or any ImageFolder tree, torchvision.transforms.v2 augmentation,
optional MixUp / CutMix."""

from __future__ import annotations

from pathlib import Path

import torch
from torch.utils.data import Dataset, default_collate
from torchvision.transforms import v2

from .base import ZooDataModule
from .image_sources import (
    CIFAR10_CLASSES,
    MNIST_CLASSES,
    CheckedImageFolder,
    TensorImages,
    TransformedSubset,
    load_cifar10,
    load_mnist,
)

# Native size and channels, normalization statistics, and whether a horizontal flip keeps the label.
DATASET_SPECS = {
    "mnist": dict(image_size=28, channels=1, mean=(0.1307,), std=(0.3081,), hflip=False, classes=MNIST_CLASSES),
    "cifar10": dict(
        image_size=32,
        channels=3,
        mean=(0.4914, 0.4822, 0.4465),
        std=(0.2470, 0.2435, 0.2616),
        hflip=True,
        classes=CIFAR10_CLASSES,
    ),
}
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class ImageClassificationDataModule(ZooDataModule):
    """Images and integer labels for classification, from `dataset` ("mnist", "cifar10") or `image_folder` (one
    subfolder per class; with train/ and val/ (and test/) subfolders those are the splits).

    `split_sizes=[train, val, test]` (counts, or fractions) pools all images of the source and splits them with
    `split_seed`; `split_sizes=null` keeps the official train/test split and holds out `val_size` training images.
    `max_train_images=n` trains on a class-balanced, seeded subset (a smaller n gives a subset of a larger one).
    """

    task, description = "image_classification", "an image dataset"

    def __init__(
        self,
        dataset: str | None = "mnist",
        image_folder: str | None = None,
        image_size: int | None = None,
        grayscale: bool = False,
        batch_size: int = 128,
        eval_batch_size: int | None = None,
        split_sizes: list[float] | None = (8000, 1000, 1000),
        val_size: int | float = 5000,
        split_seed: int = 0,
        max_train_images: int | None = None,
        crop_padding: int = 2,
        hflip: bool | None = None,
        rotation: float = 0.0,
        randaugment: bool = False,
        randaugment_magnitude: int = 9,
        random_erasing: float = 0.0,
        mixup_alpha: float = 0.0,
        cutmix_alpha: float = 0.0,
        **shared,
    ) -> None:
        super().__init__(**shared)
        if (dataset is None) == (image_folder is None):
            raise ValueError("give exactly one of data.dataset (mnist, cifar10) or data.image_folder (your own images)")
        if dataset is not None and dataset not in DATASET_SPECS:
            raise ValueError(
                f"unknown image dataset '{dataset}'; choose one of {', '.join(DATASET_SPECS)} or give data.image_folder"
            )
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        if split_sizes is not None and (len(split_sizes) != 3 or any(s <= 0 for s in split_sizes)):
            raise ValueError(f"split_sizes must be three positive sizes [train, val, test], got {list(split_sizes)}")
        if max_train_images is not None and max_train_images <= 0:
            raise ValueError(f"data.max_train_images must be a positive count (or null: all), got {max_train_images}")
        if mixup_alpha < 0 or cutmix_alpha < 0:
            raise ValueError("mixup_alpha and cutmix_alpha must be >= 0 (0 turns them off)")
        self._folder_classes: list[str] | None = None
        self._splits: dict[str, Dataset] = {}

    @property
    def spec(self) -> dict:
        hp = self.hparams
        if hp.dataset is not None:
            spec = dict(DATASET_SPECS[hp.dataset])
            spec["image_size"] = hp.image_size or spec["image_size"]
            return spec
        channels = 1 if hp.grayscale else 3
        mean = (sum(IMAGENET_MEAN) / 3,) if hp.grayscale else IMAGENET_MEAN
        std = (sum(IMAGENET_STD) / 3,) if hp.grayscale else IMAGENET_STD
        return dict(
            image_size=hp.image_size or 224,
            channels=channels,
            mean=mean,
            std=std,
            hflip=True,
            classes=self._classes_of_folder(),
        )

    def _classes_of_folder(self) -> list[str]:
        if self._folder_classes is None:
            root = Path(self.hparams.image_folder)
            tree = root / "train" if (root / "train").is_dir() else root
            self._folder_classes = CheckedImageFolder(tree).classes
        return self._folder_classes

    @property
    def class_names(self) -> list[str]:
        return list(self.spec["classes"])

    @property
    def model_fields(self) -> dict:
        spec = self.spec
        return {"num_classes": len(spec["classes"]), "image_size": spec["image_size"], "in_channels": spec["channels"]}

    @property
    def task_inputs(self) -> dict:
        """Class names for the confusion matrix and the normalization to undo when images are drawn."""
        spec = self.spec
        return {"class_names": self.class_names, "image_mean": list(spec["mean"]), "image_std": list(spec["std"])}

    def transforms(self, train: bool) -> v2.Compose:
        hp, spec = self.hparams, self.spec
        size = spec["image_size"]
        steps: list = [v2.ToImage()]  # PIL -> tensor; tensors pass through as images
        if hp.image_folder is not None:
            # Photos come in any size: random-resized crops for training, resize + center crop for evaluation.
            steps += (
                [v2.RandomResizedCrop(size, scale=(0.35, 1.0), antialias=True)]
                if train
                else [v2.Resize(int(round(size / 0.875)), antialias=True), v2.CenterCrop(size)]
            )
        elif size != DATASET_SPECS[hp.dataset]["image_size"]:
            steps.append(v2.Resize(size, antialias=True))
        if train:
            if hp.crop_padding and hp.image_folder is None:
                steps.append(v2.RandomCrop(size, padding=hp.crop_padding))
            if hp.rotation:
                steps.append(v2.RandomRotation(hp.rotation))
            if spec["hflip"] if hp.hflip is None else hp.hflip:
                steps.append(v2.RandomHorizontalFlip())
            if hp.randaugment:
                steps.append(v2.RandAugment(num_ops=2, magnitude=hp.randaugment_magnitude))
        steps += [v2.ToDtype(torch.float32, scale=True), v2.Normalize(list(spec["mean"]), list(spec["std"]))]
        if train and hp.random_erasing:
            steps.append(v2.RandomErasing(p=hp.random_erasing))
        return v2.Compose(steps)

    def _collate(self):
        """MixUp / CutMix act on whole batches (soft targets); one of them is picked per batch when both are on."""
        hp = self.hparams
        num_classes = len(self.spec["classes"])
        mixers = []
        if hp.mixup_alpha:
            mixers.append(v2.MixUp(alpha=hp.mixup_alpha, num_classes=num_classes))
        if hp.cutmix_alpha:
            mixers.append(v2.CutMix(alpha=hp.cutmix_alpha, num_classes=num_classes))
        if not mixers:
            return default_collate
        mix = mixers[0] if len(mixers) == 1 else v2.RandomChoice(mixers)

        def collate(batch):
            return mix(*default_collate(batch))

        return collate

    def _sources(self) -> tuple[Dataset, Dataset | None, Dataset | None]:
        """(train pool, official val or None, official test or None), untransformed."""
        hp = self.hparams
        if hp.dataset == "mnist":
            if hp.split_sizes is None:
                train = TensorImages(*load_mnist(self.data_dir, split="train", download=hp.download))
                return train, None, TensorImages(*load_mnist(self.data_dir, split="test", download=hp.download))
            # Only the 10k official test images are needed (and often all there is): pool them.
            return TensorImages(*load_mnist(self.data_dir, split="test", download=hp.download)), None, None
        if hp.dataset == "cifar10":
            splits = load_cifar10(self.data_dir, self.cache_dir, download=hp.download)
            return TensorImages(*splits["train"]), None, TensorImages(*splits["test"])
        root = Path(hp.image_folder)
        if (root / "train").is_dir():
            val = next((root / s for s in ("val", "valid", "validation") if (root / s).is_dir()), None)
            test = root / "test" if (root / "test").is_dir() else None
            if val is None and hp.split_sizes is None:
                raise ValueError(f"{root} has train/ but no val/ folder; add one or set data.split_sizes")
            load = lambda p: CheckedImageFolder(p, grayscale=hp.grayscale) if p is not None else None  # noqa: E731
            train_ds, val_ds, test_ds = load(root / "train"), load(val), load(test)
            for name, ds in (("val", val_ds), ("test", test_ds)):
                if ds is not None and ds.classes != train_ds.classes:
                    raise ValueError(f"the class folders of {root / name} differ from those of {root / 'train'}")
            return train_ds, val_ds, test_ds
        return CheckedImageFolder(root, grayscale=hp.grayscale), None, None

    def _split(self) -> dict[str, tuple[Dataset, list[int]]]:
        splits = self._full_split()
        n = self.hparams.max_train_images
        if n is not None:
            base, indices = splits["train"]
            if n > len(indices):
                raise ValueError(
                    f"data.max_train_images={n} is more than the {len(indices)} training images; lower it or "
                    "set it to null"
                )
            generator = torch.Generator().manual_seed(self.hparams.split_seed)
            splits["train"] = (base, class_balanced_subset(base, list(indices), n, generator))
        return splits

    def _full_split(self) -> dict[str, tuple[Dataset, list[int]]]:
        hp = self.hparams
        pool, official_val, official_test = self._sources()
        generator = torch.Generator().manual_seed(hp.split_seed)
        if hp.split_sizes is not None:
            parts = [pool] + [d for d in (official_val, official_test) if d is not None]
            pooled = parts[0] if len(parts) == 1 else torch.utils.data.ConcatDataset(parts)
            sizes = _counts(hp.split_sizes, len(pooled))
            order = torch.randperm(len(pooled), generator=generator).tolist()
            a, b = sizes[0], sizes[0] + sizes[1]
            return {
                "train": (pooled, order[:a]),
                "val": (pooled, order[a:b]),
                "test": (pooled, order[b : b + sizes[2]]),
            }
        splits = {}
        if official_val is None:
            (val_count,) = _counts([hp.val_size], len(pool))
            order = torch.randperm(len(pool), generator=generator).tolist()
            splits["train"], splits["val"] = (pool, order[val_count:]), (pool, order[:val_count])
        else:
            splits["train"], splits["val"] = (pool, range(len(pool))), (official_val, range(len(official_val)))
        if official_test is None:
            raise ValueError("this image source has no test split of its own; set data.split_sizes=[train,val,test]")
        splits["test"] = (official_test, range(len(official_test)))
        return splits

    def build_splits(self) -> None:
        if not self._splits:
            train_tf, eval_tf = self.transforms(train=True), self.transforms(train=False)
            for name, (base, indices) in self._split().items():
                self._splits[name] = TransformedSubset(base, indices, train_tf if name == "train" else eval_tf)

    def train_dataset(self) -> Dataset:
        return self._splits["train"]

    def eval_dataset(self, split: str) -> Dataset:
        return self._splits[split]

    def loader_batch_size(self, train: bool) -> int:
        return self.per_device_batch_size if train else self.hparams.eval_batch_size or self.per_device_batch_size

    def collate(self, train: bool):
        return self._collate() if train else default_collate


def class_balanced_subset(base: Dataset, indices: list[int], n: int, generator: torch.Generator) -> list[int]:
    """`n` of `indices`, as even over the classes as they allow: in a seeded random order, taken one class at a time
    in turn; the first n of that order, so a smaller n gives a subset of a larger one."""
    labels = dataset_labels(base, indices)
    by_class: dict[int, list[int]] = {}
    for k in torch.randperm(len(indices), generator=generator).tolist():
        by_class.setdefault(labels[k], []).append(indices[k])
    queues = [by_class[c] for c in sorted(by_class)]
    chosen: list[int] = []
    for rank in range(max(len(q) for q in queues)):
        chosen += [q[rank] for q in queues if rank < len(q)]
        if len(chosen) >= n:
            break
    return chosen[:n]


def dataset_labels(base: Dataset, indices: list[int]) -> list[int]:
    """The labels of `indices` of a dataset, read without decoding images where the dataset keeps them apart."""
    if isinstance(base, TensorImages):
        return base.labels[indices].tolist()
    if isinstance(base, torch.utils.data.ConcatDataset) and all(isinstance(d, TensorImages) for d in base.datasets):
        return torch.cat([d.labels for d in base.datasets])[indices].tolist()
    if hasattr(base, "targets"):  # torchvision's ImageFolder
        return [int(base.targets[i]) for i in indices]
    return [int(base[i][1]) for i in indices]


def _counts(sizes, total: int) -> list[int]:
    """Sizes as counts: fractions (all < 1) of `total`, else integers; they must fit in `total`."""
    fractional = all(isinstance(s, float) and s < 1 for s in sizes)
    counts = [int(round(s * total)) for s in sizes] if fractional else [int(s) for s in sizes]
    if sum(counts) > total:
        raise ValueError(f"split sizes {list(sizes)} need {sum(counts)} images but the source has only {total}")
    if any(c <= 0 for c in counts):
        raise ValueError(f"split sizes {list(sizes)} leave an empty split of {total} images")
    return counts
