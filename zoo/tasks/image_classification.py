"""Image classification (ViT): cross-entropy with label smoothing (and soft MixUp/CutMix targets), top-1/top-5
accuracy, AdamW with optional layer-wise lr decay, and a confusion matrix and attention rollout at validation."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy, MulticlassConfusionMatrix

from zoo.models import ZooModel
from zoo.optim.param_groups import layer_decay_groups

from .base import ZooTask
from .image_logging import attention_rollout, confusion_matrix_figure, log_figure, log_image, rollout_image


class ImageClassificationTask(ZooTask):
    task_name = "image_classification"
    throughput_unit = "images"

    def __init__(
        self,
        net: ZooModel,
        optimizer: Callable[..., torch.optim.Optimizer] | None = None,
        scheduler: Callable[..., torch.optim.lr_scheduler.LRScheduler] | None = None,
        *,
        weight_decay: float = 0.05,
        label_smoothing: float = 0.0,
        layer_decay: float | None = None,
        class_names: list[str] | None = None,
        image_mean: list[float] | None = None,
        image_std: list[float] | None = None,
        compile: bool = False,
        log_images: bool = True,
        num_rollout_images: int = 6,
    ) -> None:
        """optimizer / scheduler: partials (Hydra `_partial_: true`) completed with the parameter groups / the
        optimizer. layer_decay: fine-tuning's layer-wise lr decay (e.g. 0.75): block i of L trains at
        lr * layer_decay^(L + 1 - (i + 1)), the embeddings at the lowest rate, the head at the full rate.
        class_names, image_mean, image_std: from the data, to label the confusion matrix and draw images."""
        # Hydra hands list arguments over as ListConfig, which checkpoints loaded with weights_only=True refuse.
        class_names = None if class_names is None else [str(c) for c in class_names]
        image_mean = None if image_mean is None else [float(v) for v in image_mean]
        image_std = None if image_std is None else [float(v) for v in image_std]
        if not 0.0 <= label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {label_smoothing}")
        if layer_decay is not None and not 0.0 < layer_decay <= 1.0:
            raise ValueError(f"layer_decay must be in (0, 1] (or null for none), got {layer_decay}")
        if layer_decay is not None and not hasattr(net, "layer_index"):
            raise ValueError(f"layer_decay needs a model that numbers its layers; {type(net).__name__} does not")
        num_classes = net.config.num_classes
        if num_classes < 2:
            raise ValueError(f"image classification needs num_classes >= 2, the model has {num_classes}")
        super().__init__(net, optimizer, scheduler, weight_decay=weight_decay, compile=compile)
        self.num_classes = num_classes
        self.top_k = min(5, num_classes - 1)  # top-5 is meaningless with 5 classes or fewer
        self.train_acc = MulticlassAccuracy(num_classes, average="micro")
        self.val_loss, self.test_loss = MeanMetric(), MeanMetric()
        self.val_acc, self.test_acc = (
            MulticlassAccuracy(num_classes, average="micro"),
            MulticlassAccuracy(num_classes, average="micro"),
        )
        self.val_topk = MulticlassAccuracy(num_classes, top_k=self.top_k, average="micro")
        self.test_topk = MulticlassAccuracy(num_classes, top_k=self.top_k, average="micro")
        self.val_confusion = MulticlassConfusionMatrix(num_classes)
        self._rollout_batch: tuple[torch.Tensor, torch.Tensor] | None = None

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.net(images)

    def _loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        # Hard labels (B,) or MixUp/CutMix probabilities (B, C); cross_entropy takes both, with smoothing.
        return F.cross_entropy(logits.float(), targets, label_smoothing=self.hparams.label_smoothing)

    # ---- training ------------------------------------------------------------------------------------------
    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        images, targets = batch
        logits = self(images)
        loss = self._loss(logits, targets)
        hard = targets.argmax(dim=-1) if targets.dim() == 2 else targets
        self.train_acc(logits.detach(), hard)
        self.log("train/loss", loss, prog_bar=True)
        self.log("train/acc", self.train_acc, prog_bar=True)
        return loss

    def batch_samples(self, batch) -> int:
        return batch[0].shape[0]

    def batch_items(self, batch) -> int:
        return batch[0].shape[0]

    def batch_flops(self, batch) -> float | None:
        per_image = getattr(self.net, "flops_per_image", None)
        return None if per_image is None else per_image() * batch[0].shape[0]

    def param_groups(self) -> list[dict]:
        """No weight decay on biases, norm scales, the class token and positions; with layer_decay, one group
        per depth carrying its `lr_scale`."""
        if self.hparams.layer_decay is None:
            return super().param_groups()
        return layer_decay_groups(self.net, self.hparams.weight_decay, self.hparams.layer_decay)

    # ---- evaluation ----------------------------------------------------------------------------------------
    def validation_step(self, batch, batch_idx: int) -> None:
        images, labels = batch
        logits = self(images)
        self.val_loss.update(self._loss(logits, labels), weight=labels.numel())
        self.val_acc.update(logits, labels)
        self.val_topk.update(logits, labels)
        self.val_confusion.update(logits, labels)
        if batch_idx == 0:
            k = self.hparams.num_rollout_images
            self._rollout_batch = (images[:k].detach(), labels[:k].detach())

    def on_validation_epoch_end(self) -> None:
        # Metric objects reduce over ranks by themselves; compute() runs on every rank.
        self.log("val/loss", self.val_loss.compute(), prog_bar=True)
        self.log("val/acc", self.val_acc.compute(), prog_bar=True)
        self.log(f"val/acc_top{self.top_k}", self.val_topk.compute())
        confusion = self.val_confusion.compute()
        for metric in (self.val_loss, self.val_acc, self.val_topk, self.val_confusion):
            metric.reset()
        if self.hparams.log_images and not self.trainer.sanity_checking and self.trainer.is_global_zero:
            self._log_pictures(confusion)
        self._rollout_batch = None

    def _log_pictures(self, confusion: torch.Tensor) -> None:
        loggers, step = self.loggers, self.global_step
        if not loggers:
            return
        log_figure(
            loggers,
            "val/confusion_matrix",
            confusion_matrix_figure(confusion, self.hparams.class_names, title=f"val, step {step}"),
            step,
        )
        if self._rollout_batch is None or not hasattr(self.net, "attention_maps"):
            return
        images, labels = self._rollout_batch
        maps = self.net.attention_maps(images)
        with torch.no_grad():
            predictions = self.net(images).argmax(-1)
        c = self.net.config
        grid = (images.shape[-2] // c.patch_size, images.shape[-1] // c.patch_size)
        heat = attention_rollout(maps, self.net.num_prefix_tokens, grid, from_class_token=c.pool == "token")
        channels = images.shape[1]
        mean = self.hparams.image_mean or [0.0] * channels
        std = self.hparams.image_std or [1.0] * channels
        picture = rollout_image(
            images,
            heat,
            mean=mean,
            std=std,
            labels=labels,
            predictions=predictions,
            class_names=self.hparams.class_names,
        )
        log_image(loggers, "val/attention_rollout", picture, step)

    def test_step(self, batch, batch_idx: int) -> None:
        images, labels = batch
        logits = self(images)
        self.test_loss.update(self._loss(logits, labels), weight=labels.numel())
        self.test_acc.update(logits, labels)
        self.test_topk.update(logits, labels)

    def on_test_epoch_end(self) -> None:
        self.log("test/loss", self.test_loss.compute())
        self.log("test/acc", self.test_acc.compute())
        self.log(f"test/acc_top{self.top_k}", self.test_topk.compute())
        for metric in (self.test_loss, self.test_acc, self.test_topk):
            metric.reset()

    # ---- checkpoints ---------------------------------------------------------------------------------------
    def checkpoint_extras(self) -> dict:
        # What labels the outputs and undoes the normalization, for evaluation without the data folder.
        return {
            "class_names": self.hparams.class_names,
            "image_mean": self.hparams.image_mean,
            "image_std": self.hparams.image_std,
        }
