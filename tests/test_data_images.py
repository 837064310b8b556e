"""The image-classification DataModule on real files: MNIST from the data directory, ImageFolder trees written here."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
import torch
from PIL import Image

from zoo.data import ImageClassificationDataModule
from zoo.data.image_sources import read_idx

MNIST_DIR_FILES = ("mnist/t10k-images-idx3-ubyte.gz", "mnist/t10k-labels-idx1-ubyte.gz")


@pytest.fixture(scope="module")
def mnist_dir(data_dir) -> Path:
    if not all((data_dir / f).is_file() for f in MNIST_DIR_FILES):
        pytest.fail(f"MNIST test files not found under {data_dir}; set ZOO_DATA_DIR to the datasets' folder")
    return data_dir


@pytest.mark.full_data  # the default split takes 8000/1000/1000 of the 10k test images
def test_mnist_split_is_seeded_disjoint_and_complete(mnist_dir):
    """8000/1000/1000 of the 10k images: disjoint, together all of them, the same for the same seed."""
    dm = ImageClassificationDataModule(dataset="mnist", data_dir=str(mnist_dir), batch_size=64)
    dm.setup("fit")
    indices = {name: set(dm._splits[name].indices) for name in ("train", "val", "test")}
    assert [len(indices[n]) for n in ("train", "val", "test")] == [8000, 1000, 1000]
    assert set().union(*indices.values()) == set(range(10_000))
    again = ImageClassificationDataModule(dataset="mnist", data_dir=str(mnist_dir))
    again.setup("fit")
    assert again._splits["val"].indices == dm._splits["val"].indices
    other = ImageClassificationDataModule(dataset="mnist", data_dir=str(mnist_dir), split_seed=1)
    other.setup("fit")
    assert other._splits["val"].indices != dm._splits["val"].indices


@pytest.mark.full_data  # the default split takes 8000/1000/1000 of the 10k test images
def test_mnist_batches_and_model_fields(mnist_dir):
    dm = ImageClassificationDataModule(dataset="mnist", data_dir=str(mnist_dir), batch_size=64, eval_batch_size=100)
    assert dm.model_fields == {"num_classes": 10, "image_size": 28, "in_channels": 1}
    assert dm.task_inputs["class_names"] == [str(d) for d in range(10)]
    dm.setup("fit")
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (64, 1, 28, 28) and x.dtype == torch.float32 and y.dtype == torch.int64
    xv, yv = next(iter(dm.val_dataloader()))
    assert xv.shape == (100, 1, 28, 28)
    # Normalized with MNIST's statistics: the background (0) maps to -mean/std.
    assert xv.min().item() == pytest.approx(-0.1307 / 0.3081, abs=1e-4)
    assert abs(xv.mean().item()) < 0.2 and 0.8 < xv.std().item() < 1.2
    # Validation has no augmentation: the same batch twice.
    assert torch.equal(next(iter(dm.val_dataloader()))[0], xv)


def test_mnist_labels_are_the_known_first_digits(mnist_dir):
    labels = read_idx(mnist_dir / MNIST_DIR_FILES[1], magic=0x00000801)
    assert labels[:10].tolist() == [7, 2, 1, 0, 4, 1, 4, 9, 5, 9]


@pytest.mark.full_data  # the default split takes 8000/1000/1000 of the 10k test images
def test_mixup_cutmix_give_soft_targets(mnist_dir):
    dm = ImageClassificationDataModule(
        dataset="mnist", data_dir=str(mnist_dir), batch_size=32, mixup_alpha=0.8, cutmix_alpha=1.0, randaugment=True
    )
    dm.setup("fit")
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (32, 1, 28, 28) and y.shape == (32, 10)
    torch.testing.assert_close(y.sum(-1), torch.ones(32))
    assert (y.max(-1).values < 1).any()  # some targets are genuinely mixed


def test_mnist_without_train_files_needs_split_sizes(mnist_dir, tmp_path):
    """split_sizes=null asks for the official 60k training images, which CI's data lacks: a clear error."""
    dm = ImageClassificationDataModule(dataset="mnist", data_dir=str(tmp_path), split_sizes=None)
    with pytest.raises(FileNotFoundError, match="train-images-idx3-ubyte.gz"):
        dm.setup("fit")


def test_missing_and_corrupt_mnist_files_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="ZOO_DATA_DIR"):
        ImageClassificationDataModule(dataset="mnist", data_dir=str(tmp_path)).setup("fit")
    (tmp_path / "mnist").mkdir()
    (tmp_path / MNIST_DIR_FILES[0]).write_bytes(gzip.compress(b"\x00\x00\x08\x03" + b"\x00" * 20))
    (tmp_path / MNIST_DIR_FILES[1]).write_bytes(b"not gzip at all")
    with pytest.raises(ValueError, match="truncated"):
        ImageClassificationDataModule(dataset="mnist", data_dir=str(tmp_path)).setup("fit")


def test_cifar10_missing_names_the_path(tmp_path):
    dm = ImageClassificationDataModule(dataset="cifar10", data_dir=str(tmp_path), split_sizes=None)
    assert dm.model_fields == {"num_classes": 10, "image_size": 32, "in_channels": 3}
    with pytest.raises(FileNotFoundError, match="cifar-10-python.tar.gz"):
        dm.setup("fit")


def test_bad_options():
    with pytest.raises(ValueError, match="exactly one"):
        ImageClassificationDataModule(dataset="mnist", image_folder="x")
    with pytest.raises(ValueError, match="imagenet"):
        ImageClassificationDataModule(dataset="imagenet")
    with pytest.raises(ValueError, match="split_sizes"):
        ImageClassificationDataModule(split_sizes=[8000, 2000])


# ---- ImageFolder -----------------------------------------------------------------------------------------------
def make_tree(root: Path, classes=("cat", "dog"), per_class: int = 6, size=(40, 30)) -> Path:
    for k, name in enumerate(classes):
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            color = (40 * k + 10 * i, 100, 200 - 30 * k)
            mode = "L" if i % 3 == 0 else "RGB"  # mixed channel counts are converted
            Image.new(mode, size, color[0] if mode == "L" else color).save(root / name / f"{i}.png")
    return root


def test_image_folder_split_and_resize(tmp_path):
    root = make_tree(tmp_path / "pets")
    dm = ImageClassificationDataModule(
        dataset=None, image_folder=str(root), image_size=16, batch_size=4, split_sizes=[0.5, 0.25, 0.25]
    )
    assert dm.model_fields == {"num_classes": 2, "image_size": 16, "in_channels": 3}
    assert dm.class_names == ["cat", "dog"]
    dm.setup("fit")
    assert [len(dm._splits[s]) for s in ("train", "val", "test")] == [6, 3, 3]
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (4, 3, 16, 16) and set(y.tolist()) <= {0, 1}
    xv, _ = next(iter(dm.val_dataloader()))
    assert xv.shape[1:] == (3, 16, 16)


def test_image_folder_with_train_val_folders(tmp_path):
    make_tree(tmp_path / "train")
    make_tree(tmp_path / "val", per_class=2)
    dm = ImageClassificationDataModule(
        dataset=None, image_folder=str(tmp_path), image_size=8, batch_size=2, split_sizes=None
    )
    with pytest.raises(ValueError, match="test split"):
        dm.setup("fit")
    make_tree(tmp_path / "test", per_class=1)
    dm = ImageClassificationDataModule(
        dataset=None, image_folder=str(tmp_path), image_size=8, batch_size=2, split_sizes=None, grayscale=True
    )
    dm.setup("fit")
    assert [len(dm._splits[s]) for s in ("train", "val", "test")] == [12, 4, 2]
    assert next(iter(dm.test_dataloader()))[0].shape == (2, 1, 8, 8)


def test_image_folder_empty_class_folder_is_named(tmp_path):
    root = make_tree(tmp_path / "pets")
    (root / "bird").mkdir()
    (root / "bird" / "notes.txt").write_text("no images here")
    with pytest.raises(ValueError, match=r"bird.*hold no images"):
        _ = ImageClassificationDataModule(dataset=None, image_folder=str(root)).model_fields


def test_image_folder_missing_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="image folder not found"):
        ImageClassificationDataModule(dataset=None, image_folder=str(tmp_path / "nope")).setup("fit")


def test_corrupt_image_file_is_named(tmp_path):
    root = make_tree(tmp_path / "pets", per_class=2)
    (root / "dog" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n this is not really a png")
    dm = ImageClassificationDataModule(
        dataset=None, image_folder=str(root), image_size=8, batch_size=1, split_sizes=[3, 1, 1]
    )
    dm.setup("fit")
    with pytest.raises(ValueError, match=r"cannot read image .*broken\.png"):
        for loader in (dm.train_dataloader(), dm.val_dataloader(), dm.test_dataloader()):
            for _ in loader:
                pass


def test_corrupt_cifar10_folder_is_named(tmp_path):
    """A cifar-10-batches-py folder whose batches fail torchvision's md5 check: a clear error, not a crash later."""
    folder = tmp_path / "cifar10" / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    (folder / "data_batch_1").write_bytes(b"junk")
    dm = ImageClassificationDataModule(dataset="cifar10", data_dir=str(tmp_path), split_sizes=None)
    with pytest.raises(ValueError, match="incomplete or corrupt"):
        dm.setup("fit")
