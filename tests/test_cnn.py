"""The CNN baseline: torchvision's resnet18 layout, trained by the image-classification task like ViT (loss goes
down on real MNIST, checkpoints reload), and the class-balanced training subsets of the data-size question."""

from __future__ import annotations

import csv
from functools import partial
from pathlib import Path

import lightning as L
import pytest
import torch
import torchvision
from torch import nn
from trained import evaluate_in_process, train_in_process

from zoo.checkpointing.reading import load_model_from_checkpoint
from zoo.data import ImageClassificationDataModule
from zoo.data.images import dataset_labels
from zoo.models import CNN, MODEL_TYPES
from zoo.tasks import ImageClassificationTask
from zoo.tasks.base import ZooTask


def test_resnet18_preset_is_torchvisions_resnet18_with_a_3x3_stem():
    ours = CNN.from_preset("resnet18", in_channels=1, num_classes=10, image_size=28)
    ref = torchvision.models.resnet18(num_classes=10)
    ref.conv1 = nn.Conv2d(1, 64, kernel_size=3, stride=1, padding=1, bias=False)
    ref.maxpool = nn.Identity()
    assert ours.num_parameters() == sum(p.numel() for p in ref.parameters()) == 11_172_810
    ours.load_state_dict(ref.state_dict())  # same names and shapes, strictly
    images = torch.randn(3, 1, 28, 28)
    torch.testing.assert_close(ours.eval()(images), ref.eval()(images), rtol=0, atol=0)


def test_cifar_presets_and_bad_options():
    net = CNN.from_preset("resnet20", in_channels=3, num_classes=10)
    assert 0.26e6 < net.num_parameters() < 0.28e6  # He et al. 2016 Table 6: ResNet-20 has 0.27M parameters
    assert net(torch.randn(2, 3, 32, 32)).shape == (2, 10)
    assert net.flops_per_image() > 3 * 40e6  # ~41M multiply-adds forward per 32 px image (x2 FLOPs, x3 training)
    with pytest.raises(ValueError, match="same, non-zero length"):
        CNN.from_preset("resnet8", widths=[16, 32], blocks=[1, 1, 1])
    with pytest.raises(ValueError, match="in_channels=3"):
        net(torch.randn(2, 1, 32, 32))
    assert MODEL_TYPES["cnn"] is CNN


@pytest.fixture(scope="module")
def mnist(data_dir):
    dm = ImageClassificationDataModule(
        dataset="mnist", data_dir=str(data_dir), batch_size=32, eval_batch_size=50, split_sizes=[640, 100, 50]
    )
    return dm


class LossLog(L.Callback):
    def __init__(self):
        self.losses = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.losses.append(float(outputs["loss"]))


def test_cnn_trains_on_mnist_and_its_checkpoint_reloads(mnist, tmp_path):
    L.seed_everything(0)
    net = CNN.from_preset("resnet8", **mnist.model_fields)
    task = ImageClassificationTask(
        net, optimizer=partial(torch.optim.AdamW, lr=3e-3), log_images=False, **mnist.task_inputs
    )
    log = LossLog()
    trainer = L.Trainer(
        max_steps=40,
        limit_val_batches=2,
        val_check_interval=40,
        check_val_every_n_epoch=None,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[log],
        default_root_dir=tmp_path,
    )
    trainer.fit(task, datamodule=mnist)
    first, last = sum(log.losses[:5]) / 5, sum(log.losses[-5:]) / 5
    assert first > 1.8 and last < 0.8 * first, log.losses  # chance is ln(10) = 2.3 (+ label smoothing 0.1)
    # Twice chance on 100 held-out images (a model at chance reaches 20/100 with probability ~0.2%). After 40 steps
    # the full data gives ~0.6, the 1,000-image fixtures ~0.3: the threshold holds on both.
    assert float(trainer.callback_metrics["val/acc"]) > 0.2

    path = tmp_path / "cnn.ckpt"
    trainer.save_checkpoint(path)
    images = next(iter(mnist.val_dataloader()))[0][:8]
    expected = task.eval()(images)
    reloaded = ZooTask.load_from_checkpoint(path)
    assert isinstance(reloaded, ImageClassificationTask) and isinstance(reloaded.net, CNN)
    torch.testing.assert_close(reloaded.eval()(images), expected)
    model, info = load_model_from_checkpoint(path, task="image_classification")
    assert info["model_type"] == "cnn" and info["model_config"]["in_channels"] == 1
    torch.testing.assert_close(model(images), expected)


def test_train_entry_model_cnn_data_mnist_then_eval(tmp_path, data_dir):
    """The train and eval entries (run in this process: tests/trained.py)."""
    run_dir = tmp_path / "run"
    short = [
        "trainer.max_steps=3",
        "trainer.val_check_interval=3",
        "trainer.limit_val_batches=2",
        "trainer.log_every_n_steps=1",
    ]
    train_in_process("model=cnn", "data=mnist", *short, "test=false", f"hydra.run.dir={run_dir}")
    rows = list(csv.DictReader(Path(run_dir / "csv" / "metrics.csv").read_text().splitlines()))
    assert [r for r in rows if r.get("val/acc")] and [r for r in rows if r.get("train/loss")]
    assert any(r.get("train/images_per_sec") for r in rows) and any(r.get("train/mfu") for r in rows)  # as ViT
    result = evaluate_in_process(
        f"ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'}",
        "split=val",
        "++trainer.limit_val_batches=2",
        f"hydra.run.dir={tmp_path / 'eval'}",
    )
    assert "val/acc" in result.stdout


def test_max_train_images_is_class_balanced_seeded_and_nested(data_dir):
    def train_indices(n, seed=0):
        dm = ImageClassificationDataModule(
            dataset="mnist", data_dir=str(data_dir), split_sizes=[0.8, 0.1, 0.1], max_train_images=n, split_seed=seed
        )
        dm.setup("fit")
        split = dm._splits["train"]
        return split.base, split.indices

    base, small = train_indices(50)
    _, large = train_indices(200)
    assert len(small) == 50 and len(large) == 200
    counts = torch.bincount(torch.tensor(dataset_labels(base, small)), minlength=10)
    assert counts.tolist() == [5] * 10  # 10 classes, 5 each
    assert set(small) <= set(large)  # a data-size sweep trains on nested subsets
    assert train_indices(50)[1] == small and train_indices(50, seed=1)[1] != small
    with pytest.raises(ValueError, match="max_train_images"):
        train_indices(10**6)
    with pytest.raises(ValueError, match="max_train_images"):
        ImageClassificationDataModule(dataset="mnist", data_dir=str(data_dir), max_train_images=0)
