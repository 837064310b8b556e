"""The train and eval entries with the ViT configs (run in this process: tests/trained.py; the recipe's run is the
session's), on real MNIST files."""

from __future__ import annotations

import csv
from pathlib import Path

import torch
from PIL import Image
from trained import evaluate_in_process, train_in_process, train_refused

SHORT = [
    "trainer.max_steps=3",
    "trainer.val_check_interval=3",
    "trainer.limit_val_batches=2",
    "++trainer.limit_test_batches=2",
    "trainer.log_every_n_steps=1",
]
# vit_run: the tuned recipe for three steps with SHORT (fit, validation with pictures, test, checkpoint), the
# session's run (tests/trained.py, VIT_RUN).


def test_fast_dev_run_of_model_vit(tmp_path, data_dir):
    result = train_in_process("model=vit", "trainer.fast_dev_run=true", f"hydra.run.dir={tmp_path}")
    assert "Running in `fast_dev_run` mode" in result.stdout + result.stderr


def test_vit_mnist_logs_metrics_pictures_and_checkpoint(vit_run):
    rows = list(csv.DictReader(Path(vit_run / "csv" / "metrics.csv").read_text().splitlines()))
    assert [r for r in rows if r.get("val/acc")] and [r for r in rows if r.get("test/acc")]
    assert all(0 <= float(r["test/acc"]) <= float(r["test/acc_top5"]) <= 1 for r in rows if r.get("test/acc"))
    losses = [float(r["train/loss"]) for r in rows if r.get("train/loss")]
    assert len(losses) == 3 and all(0 < v < 5 for v in losses)
    images = {p.name for p in (vit_run / "csv" / "images").iterdir()}
    assert {"val_confusion_matrix_step000003.png", "val_attention_rollout_step000003.png"} <= images
    with Image.open(vit_run / "csv" / "images" / "val_confusion_matrix_step000003.png") as picture:
        assert picture.width > 100 and picture.mode == "RGB"
    checkpoint = torch.load(vit_run / "checkpoints" / "last.ckpt", weights_only=True)
    zoo = checkpoint["zoo"]
    assert zoo["task"] == "image_classification" and zoo["model_type"] == "vit"
    assert (zoo["model_config"]["image_size"], zoo["model_config"]["in_channels"]) == (28, 1)
    assert not any("_orig_mod" in k for k in checkpoint["state_dict"])


def test_eval_on_the_test_split(vit_run, tmp_path):
    result = evaluate_in_process(
        f"ckpt_path={vit_run / 'checkpoints' / 'last.ckpt'}",
        "split=test",
        "++trainer.limit_test_batches=2",
        f"hydra.run.dir={tmp_path}",
    )
    assert "test/acc" in result.stdout


def test_batchnorm_variant_trains(tmp_path, data_dir):
    run_dir = tmp_path / "bn"
    train_in_process("model=vit_bn", *SHORT, "test=false", "callbacks=none", f"hydra.run.dir={run_dir}")
    rows = list(csv.DictReader(Path(run_dir / "csv" / "metrics.csv").read_text().splitlines()))
    losses = [float(r["train/loss"]) for r in rows if r.get("train/loss")]
    assert len(losses) == 3 and all(0 < v < 5 for v in losses)


def test_model_data_mismatch_is_a_one_line_error(tmp_path, data_dir):
    result = train_refused("model=vit", "model.net.in_channels=3", f"hydra.run.dir={tmp_path}")
    assert "in_channels=3 does not match the data" in result.line and "in_channels=1" in result.line


def test_image_folder_with_empty_class_is_a_one_line_error(tmp_path):
    root = tmp_path / "pets"
    for name in ("cat", "dog"):
        (root / name).mkdir(parents=True)
    Image.new("RGB", (8, 8)).save(root / "cat" / "a.png")
    result = train_refused(
        "model=vit", "data=image_folder", f"data.image_folder={root}", f"hydra.run.dir={tmp_path / 'run'}"
    )
    assert str(root / "dog") in result.line and "hold no images" in result.line
