"""Image datasets on disk: MNIST (IDX files), CIFAR-10 (the python archive) and ImageFolder trees, as uint8 image
tensors (N, C, H, W) with int64 labels or torchvision datasets, with errors that name the file or folder at fault.
"""

from __future__ import annotations

import gzip
import tarfile
from pathlib import Path

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError
from torch.utils.data import Dataset
from torchvision.datasets import CIFAR10, ImageFolder

from .prepare_lock import prepare_once
from .sources import resolve_dataset

MNIST_CLASSES = [str(d) for d in range(10)]
CIFAR10_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def read_idx(path: Path, *, magic: int) -> np.ndarray:
    """An IDX file (gzipped or not): big-endian uint32 magic and dimensions, then uint8 data."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError) as error:
        raise ValueError(f"{path} is not a readable (gzipped) IDX file: {error}; download it again") from error
    ndim = magic & 0xFF
    header = 4 + 4 * ndim
    if len(data) < header or int.from_bytes(data[:4], "big") != magic:
        raise ValueError(f"{path} does not start with the IDX magic number {magic:#010x}; is it the right file?")
    dims = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    if len(data) != header + int(np.prod(dims)):
        raise ValueError(f"{path} has {len(data) - header} data bytes but its header promises {dims}; it is truncated")
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(dims)


def load_mnist(data_dir: Path, *, split: str, download: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """split "test": the official 10k test images (all CI's data holds); "train": the 60k training images."""
    images_file, labels_file = resolve_dataset(
        "mnist" if split == "test" else "mnist_train", data_dir, download_missing=download
    )
    images = read_idx(images_file, magic=0x00000803)
    labels = read_idx(labels_file, magic=0x00000801)
    if len(images) != len(labels):
        raise ValueError(f"{images_file} has {len(images)} images but {labels_file} has {len(labels)} labels")
    return torch.from_numpy(images.copy())[:, None], torch.from_numpy(labels.astype(np.int64))


def load_cifar10(data_dir: Path, cache_dir: Path, *, download: bool) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Both official splits. Reads data_dir/cifar10/cifar-10-batches-py, else extracts the archive
    data_dir/cifar10/cifar-10-python.tar.gz once into cache_dir (the data folder may be read-only)."""
    root = data_dir / "cifar10"
    if not (root / "cifar-10-batches-py").is_dir():
        (archive,) = resolve_dataset("cifar10", data_dir, download_missing=download)
        root = cache_dir / "cifar10"

        def extract() -> None:
            with tarfile.open(archive, "r:gz") as tar:
                tar.extractall(root, filter="data")
            (root / "extracted").touch()  # last: a half-extracted folder is never read

        prepare_once(root / "extracted", extract, what="CIFAR-10")
    splits = {}
    for split in ("train", "test"):
        try:
            ds = CIFAR10(str(root), train=split == "train", download=False)
        except RuntimeError as error:  # torchvision's message for missing/corrupt batches
            raise ValueError(
                f"CIFAR-10 under {root} is incomplete or corrupt ({error}); delete it and fetch "
                "cifar-10-python.tar.gz again (data.download=true)"
            ) from error
        images = torch.from_numpy(ds.data).permute(0, 3, 1, 2).contiguous()
        splits[split] = (images, torch.tensor(ds.targets, dtype=torch.int64))
    return splits


class CheckedImageFolder(ImageFolder):
    """torchvision's ImageFolder, with errors that name the folder or file: an empty class folder is refused when
    the tree is read, an unreadable image when it is loaded."""

    def __init__(self, root: str | Path, *, grayscale: bool = False) -> None:
        root = Path(root)
        if not root.is_dir():
            raise FileNotFoundError(
                f"image folder not found: {root.resolve()}; data.image_folder must be a folder with one subfolder "
                "of images per class"
            )
        self.grayscale = grayscale
        try:
            super().__init__(str(root), loader=self._load, allow_empty=True)
        except FileNotFoundError as error:  # no class folders at all
            raise FileNotFoundError(f"{root.resolve()} has no class subfolders: {error}") from error
        counts = np.bincount([t for _, t in self.samples], minlength=len(self.classes))
        empty = [c for c, n in zip(self.classes, counts) if n == 0]
        if empty:
            raise ValueError(
                f"class folder(s) {', '.join(str(root / c) for c in empty)} hold no images (looked for "
                f"{', '.join(self.extensions or ())}); add images or remove the folder(s)"
            )

    def _load(self, path: str) -> Image.Image:
        try:
            with open(path, "rb") as f:
                image = Image.open(f)
                image.load()
        except (OSError, UnidentifiedImageError, SyntaxError) as error:
            raise ValueError(
                f"cannot read image {path} ({type(error).__name__}: {error}); replace or delete the file"
            ) from error
        return image.convert("L" if self.grayscale else "RGB")


class TensorImages(Dataset):
    """In-memory uint8 images (N, C, H, W) with labels, transformed per sample."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, transform=None) -> None:
        self.images, self.labels, self.transform = images, labels, transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        image = self.images[i]
        return (self.transform(image) if self.transform else image), int(self.labels[i])


class TransformedSubset(Dataset):
    """`indices` of a base dataset seen through a split-specific transform (train vs eval augmentation)."""

    def __init__(self, base: Dataset, indices, transform) -> None:
        self.base, self.indices, self.transform = base, list(indices), transform

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int):
        image, label = self.base[self.indices[i]]
        return self.transform(image), label
