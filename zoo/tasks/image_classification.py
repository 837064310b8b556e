"""Image classification (ViT): cross-entropy with label smoothing (and soft MixUp/CutMix targets), top-1/top-5
accuracy, optional layer-wise lr decay, and a confusion matrix and attention rollout at validation. A pretrained ViT
(`pretrained`: timm, torchvision or Hugging Face files, or a zoo .ckpt) is adapted to the data's image size (positions
resampled), channels and classes (a new head)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from lightning.pytorch.utilities import rank_zero_info
from torchmetrics import MeanMetric
from torchmetrics.classification import MulticlassAccuracy, MulticlassConfusionMatrix

from zoo.models import ViT, ZooModel
from zoo.optim.param_groups import layer_decay_groups

from .base import ZooTask
from .image_logging import attention_rollout, confusion_matrix_figure, log_figure, log_image, rollout_image
from .pretrained import check_architecture, load_pretrained, rebuilt, run_options

PRETRAINED_FORMATS = (
    "a Hugging Face ViT directory, a timm or torchvision weight file (.safetensors, .pth, .pt, .bin) or a timm hub "
    "directory, or a zoo checkpoint (.ckpt) of a ViT"
)
# What the data decides (image_size, in_channels, num_classes) and the run's regularization and resolution handling.
RUN_FIELDS = ("image_size", "in_channels", "num_classes", "dropout", "attn_dropout", "dynamic_image_size")


class ImageClassificationTask(ZooTask):
    task_name = "image_classification"
    throughput_unit = "images"
    # A rebuilt task takes its network from the checkpoint, not again from the pretrained model.
    not_rebuilt = ("pretrained",)

    def __init__(
        self,
        net: ZooModel,
        optimizer: Callable[..., torch.optim.Optimizer] | None = None,
        scheduler: Callable[..., torch.optim.lr_scheduler.LRScheduler] | None = None,
        *,
        weight_decay: float = 0.05,
        label_smoothing: float = 0.0,
        layer_decay: float | None = None,
        pretrained: str | None = None,
        class_names: list[str] | None = None,
        image_mean: list[float] | None = None,
        image_std: list[float] | None = None,
        compile: bool = False,
        log_images: bool = True,
        num_rollout_images: int = 6,
    ) -> None:
        """layer_decay: fine-tuning's layer-wise lr decay (e.g. 0.75; block i of L at lr * layer_decay^(L - i)).
        pretrained: ViT weights to start from (timm / torchvision / Hugging Face files, or a zoo .ckpt). class_names,
        image_mean, image_std: from the data, to label the confusion matrix and draw images. The rest: see `ZooTask`."""
        if pretrained is not None:
            net = self._from_pretrained(net, str(pretrained))
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
        self.top_k = min(5, num_classes - 1)  # top-5 is meaningless with 5 classes or fewer
        self.val_loss, self.test_loss = MeanMetric(), MeanMetric()
        self.train_acc, self.val_acc, self.test_acc = (
            MulticlassAccuracy(num_classes, average="micro") for _ in range(3)
        )
        self.val_topk, self.test_topk = (
            MulticlassAccuracy(num_classes, top_k=self.top_k, average="micro") for _ in range(2)
        )
        self.val_confusion = MulticlassConfusionMatrix(num_classes)
        self._rollout_batch: tuple[torch.Tensor, torch.Tensor] | None = None

    @staticmethod
    def _from_pretrained(net: ZooModel, pretrained: str) -> ViT:
        """The pretrained ViT for the data `net` was built for (image size, channels, classes)."""
        from zoo.interop.vit import load_vit  # interop reads the weight files; imported here, only when asked for

        if not isinstance(net, ViT):
            raise ValueError(f"model.pretrained loads ViT weights, but model.net builds a {type(net).__name__}")
        ours = net.config
        heads = net.config_overrides.get("num_heads")  # for a timm/torchvision file of a width no published ViT has

        def read(path):
            try:
                return load_vit(path, num_heads=heads)
            except ValueError as error:
                if "num_heads" in str(error):
                    raise ValueError(f"{error} (here: model.net.num_heads=...)") from None
                raise

        source, _ = load_pretrained(pretrained, ViT, read, formats=PRETRAINED_FORMATS)
        theirs = source.config
        check_architecture(net, source, pretrained, keep=RUN_FIELDS, what="ViT")
        notes = []
        if ours.image_size != theirs.image_size:
            if ours.image_size % theirs.patch_size:
                larger = -(-ours.image_size // theirs.patch_size) * theirs.patch_size
                raise ValueError(
                    f"the data's {ours.image_size}-px images do not tile into the {theirs.patch_size}-px patches of "
                    f"the pretrained ViT {pretrained}; resize them to a multiple of {theirs.patch_size} "
                    f"(e.g. data.image_size={larger})"
                )
            notes.append(f"positions resampled from {theirs.image_size} to {ours.image_size} px")
            source.set_image_size(ours.image_size)
        state = source.state_dict()
        if ours.in_channels != theirs.in_channels:
            if (theirs.in_channels, ours.in_channels) != (3, 1):
                how = "grey images (an image folder: data.grayscale=true)" if theirs.in_channels == 1 else "such data"
                raise ValueError(
                    f"the pretrained ViT {pretrained} takes {theirs.in_channels}-channel images but the data has "
                    f"{ours.in_channels} channels; fine-tune it on {how}"
                )
            # A grey image fed as R = G = B meets the sum of the three channels' kernels: the same patch embedding.
            state["patch_embed.proj.weight"] = state["patch_embed.proj.weight"].sum(dim=1, keepdim=True)
            notes.append("patch embedding summed over its RGB channels for 1-channel images")
        fresh = []
        if ours.num_classes != theirs.num_classes:
            state = {k: v for k, v in state.items() if not k.startswith("head.")}
            fresh = [f"head.{k}" for k, _ in net.head.named_parameters()]
            notes.append(f"head of {theirs.num_classes} classes replaced by one of {ours.num_classes}")
        model = rebuilt(
            source,
            image_size=ours.image_size,
            in_channels=ours.in_channels,
            num_classes=ours.num_classes,
            **run_options(net, ["dropout", "attn_dropout", "dynamic_image_size"]),
        )
        model.load_state_dict(state, strict=False)  # all but the `fresh` head
        rank_zero_info(
            f"ViT loaded from {pretrained}{': ' if notes else ''}{'; '.join(notes)}; newly initialized: "
            f"{', '.join(fresh) or 'nothing'}"
        )
        return model

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
    def validation_step(self, batch, batch_idx: int) -> dict[str, torch.Tensor]:
        images, labels = batch
        logits = self(images)
        self.val_loss.update(self._loss(logits, labels), weight=labels.numel())
        self.val_acc.update(logits, labels)
        self.val_topk.update(logits, labels)
        self.val_confusion.update(logits, labels)
        if batch_idx == 0:
            k = self.hparams.num_rollout_images
            self._rollout_batch = (images[:k].detach(), labels[:k].detach())
        # Which images were right, for callbacks that compare models image by image (zoo.lab.probes.per_example).
        return {"correct": logits.argmax(-1) == labels, "labels": labels}

    def on_validation_epoch_end(self) -> None:
        # Metric objects reduce over ranks by themselves; compute() runs on every rank.
        self.log("val/loss", self.val_loss.compute(), prog_bar=True)
        self.log("val/acc", self.val_acc.compute(), prog_bar=True)
        self.log(f"val/acc_top{self.top_k}", self.val_topk.compute())
        confusion = self.val_confusion.compute()
        for metric in (self.val_loss, self.val_acc, self.val_topk, self.val_confusion):
            metric.reset()
        if self.hparams.log_images and not self.trainer.sanity_checking:
            self._log_pictures(confusion)
        self._rollout_batch = None

    def _log_pictures(self, confusion: torch.Tensor) -> None:
        """The confusion matrix and the attention rollout of the first val images: every rank runs the rollout's
        forwards (a sharded network gathers its weights), rank 0 draws and logs."""
        loggers, step = self.loggers, self.global_step
        if not loggers:
            return
        if self.trainer.is_global_zero:
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
        if not self.trainer.is_global_zero:
            return
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
