"""ImageClassificationTask and its pictures: losses, optimizer groups, layer-wise lr decay, rollout, images."""

from __future__ import annotations

from functools import partial

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch.loggers import CSVLogger

from zoo.checkpointing.reading import load_model_from_checkpoint
from zoo.data import ImageClassificationDataModule
from zoo.models import ViT, ViTConfig
from zoo.optim.schedules import warmup_cosine
from zoo.tasks import ImageClassificationTask
from zoo.tasks.image_logging import attention_rollout, confusion_matrix_figure, rollout_image


def tiny_vit(**kw) -> ViT:
    torch.manual_seed(0)
    return ViT(
        ViTConfig(
            **(
                dict(
                    image_size=28,
                    patch_size=7,
                    in_channels=1,
                    num_classes=10,
                    embed_dim=32,
                    depth=3,
                    num_heads=2,
                    mlp_dim=64,
                )
                | kw
            )
        )
    )


def make_task(net=None, **kw) -> ImageClassificationTask:
    optimizer = partial(torch.optim.AdamW, lr=1e-3)
    scheduler = partial(warmup_cosine, warmup_steps=2, max_steps=10)
    return ImageClassificationTask(net or tiny_vit(), optimizer, scheduler, **kw)


def test_layer_decay_scales_lr_by_depth_and_skips_decay_where_it_should():
    task = make_task(layer_decay=0.5, weight_decay=0.05)
    optimizer = task.configure_optimizers()["optimizer"]
    names = {id(p): n for n, p in task.net.named_parameters()}
    seen = set()
    for group in optimizer.param_groups:
        for p in group["params"]:
            name = names[id(p)]
            seen.add(name)
            depth = task.net.layer_index(name)
            assert group["initial_lr"] == pytest.approx(1e-3 * 0.5 ** (4 - depth)), name
            decays = p.dim() >= 2 and name not in ("cls_token", "pos_emb.weight")
            assert group["weight_decay"] == (0.05 if decays else 0.0), name
    assert seen == set(names.values())
    head_lr = {
        g["initial_lr"] for g in optimizer.param_groups if any(names[id(p)] == "head.weight" for p in g["params"])
    }
    assert len(head_lr) == 1 and head_lr.pop() == pytest.approx(1e-3)


def test_without_layer_decay_every_group_has_the_base_lr():
    optimizer = make_task().configure_optimizers()["optimizer"]
    for group in optimizer.param_groups:
        assert group["initial_lr"] == pytest.approx(1e-3) and group["lr"] == pytest.approx(1e-3 / 3)  # warm-up 1/3


def test_loss_takes_hard_and_soft_targets_with_smoothing():
    task = make_task(label_smoothing=0.1)
    logits = torch.randn(4, 10)
    hard = torch.tensor([1, 2, 3, 4])
    expected = F.cross_entropy(logits, hard, label_smoothing=0.1)
    torch.testing.assert_close(task._loss(logits, hard), expected)
    torch.testing.assert_close(task._loss(logits, F.one_hot(hard, 10).float()), expected)


def test_bad_task_options():
    with pytest.raises(ValueError, match="label_smoothing"):
        make_task(label_smoothing=1.0)
    with pytest.raises(ValueError, match="layer_decay"):
        make_task(layer_decay=1.5)
    with pytest.raises(ValueError, match="num_classes"):
        make_task(net=tiny_vit(num_classes=0))


def test_rollout_follows_where_the_class_token_looks():
    """One layer whose class token attends only to patch 5 of a 3x3 grid: the rollout peaks there."""
    t = 1 + 9
    attn = torch.eye(t).repeat(2, 2, 1, 1)  # (B=2, H=2, T, T): every token attends to itself...
    attn[:, :, 0] = 0
    attn[:, :, 0, 1 + 5] = 1.0  # ...except the class token, which looks at patch 5 only
    heat = attention_rollout([attn], num_prefix=1, grid=(3, 3))
    assert heat.shape == (2, 3, 3)
    assert heat.flatten(1).argmax(1).tolist() == [5, 5] and heat.max() == 1.0 and heat.min() == 0.0
    # A pooling model (no class token): every patch looks at patch 2, so patch 2 gathers the most.
    attn = torch.eye(9).repeat(1, 1, 1, 1)
    attn[:, :, :, :] = 0
    attn[:, :, :, 2] = 1.0
    heat = attention_rollout([attn], num_prefix=0, grid=(3, 3), from_class_token=False)
    assert heat.flatten(1).argmax(1).tolist() == [2]


def test_pictures_render():
    matrix = torch.tensor([[5, 1], [0, 7]])
    figure = confusion_matrix_figure(matrix, ["cat", "dog"])
    ax = figure.axes[0]
    assert sorted(t.get_text() for t in ax.texts) == ["0", "1", "5", "7"]  # the counts, in their cells
    assert [t.get_text() for t in ax.get_xticklabels()] == ["cat", "dog"]
    assert "accuracy 92.3%" in ax.get_title()  # 12 of 13 on the diagonal
    big = confusion_matrix_figure(torch.randint(0, 9, (100, 100)))  # many classes: no counts or names, still drawn
    assert not big.axes[0].texts and not big.axes[0].get_xticks().size
    images = torch.randn(3, 1, 28, 28)
    picture = rollout_image(images, torch.rand(3, 7, 7), mean=[0.1], std=[0.3], labels=[1, 2, 3], predictions=[1, 2, 4])
    assert picture.width == 2 * 112 + 12 and picture.height > 3 * 112


def test_validation_logs_pictures_and_checkpoint_rebuilds_the_model(data_dir, tmp_path):
    """A few real MNIST steps with a CSV logger: metrics, a confusion matrix and a rollout PNG, and a checkpoint
    that load_model_from_checkpoint turns back into the same ViT."""
    dm = ImageClassificationDataModule(
        dataset="mnist", data_dir=str(data_dir), batch_size=32, eval_batch_size=50, split_sizes=[128, 100, 50]
    )
    task = make_task(**dm.task_inputs)
    trainer = L.Trainer(
        max_steps=4,
        val_check_interval=2,
        limit_val_batches=2,
        num_sanity_val_steps=0,
        logger=CSVLogger(tmp_path, name="csv", version=""),
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
        accelerator="cpu",
    )
    trainer.fit(task, datamodule=dm)
    metrics = trainer.callback_metrics
    assert {"val/acc", "val/acc_top5", "val/loss", "train/loss"} <= set(metrics)
    assert 0.0 <= float(metrics["val/acc"]) <= float(metrics["val/acc_top5"]) <= 1.0
    pictures = sorted(p.name for p in (tmp_path / "csv" / "images").iterdir())
    assert pictures == [
        "val_attention_rollout_step000002.png",
        "val_attention_rollout_step000004.png",
        "val_confusion_matrix_step000002.png",
        "val_confusion_matrix_step000004.png",
    ]
    trainer.save_checkpoint(tmp_path / "last.ckpt")
    model, info = load_model_from_checkpoint(tmp_path / "last.ckpt", task="image_classification")
    assert info["model_type"] == "vit" and info["class_names"] == [str(d) for d in range(10)]
    x = next(iter(dm.val_dataloader()))[0]
    torch.testing.assert_close(model(x), task.net.eval()(x))
    test = trainer.test(task, datamodule=dm, verbose=False)[0]
    assert 0.0 <= test["test/acc"] <= test["test/acc_top5"] <= 1.0
