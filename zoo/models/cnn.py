"""A small ResNet for 28x28 / 32x32 images: the convolutional baseline the lab compares ViT with.

Built from torchvision's own `BasicBlock` (two 3x3 convolutions with BatchNorm and a skip path), wired as
torchvision's `resnet18` is, with the change every CIFAR-size ResNet makes (He et al. 2016, section 4.2): the stem
is one 3x3 convolution of stride 1 and there is no max-pool, so a 28 px image is not cut down to 7 px before the
first block. The `resnet18` preset has exactly the modules and parameter names of
`torchvision.models.resnet18(num_classes=...)` with `conv1` replaced that way and `maxpool` an identity (its
weights load into one and back); the CIFAR presets (`resnet8`, `resnet20`) are He et al.'s 3-stage 16/32/64-wide
ResNet-(6n+2) nets, which fit a CPU budget.

It has what the image-classification task expects of a model: `config.num_classes`, image size and channels
filled in from the data, `model_type` and `config_dict()` for the checkpoint, `flops_per_image` for MFU.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode
from torchvision.models.resnet import BasicBlock, conv1x1

from .base import ZooModel, check_positive


@dataclass
class CNNConfig:
    image_size: int = 32  # the size FLOPs are counted at; the net itself takes any size (global average pooling)
    in_channels: int = 3
    num_classes: int = 10
    widths: list[int] = field(default_factory=lambda: [16, 32, 64])  # channels of each stage
    blocks: list[int] = field(default_factory=lambda: [3, 3, 3])  # BasicBlocks per stage
    # Stages after the first halve the resolution (stride 2 in their first block), as in every ResNet.

    def __post_init__(self) -> None:
        check_positive(image_size=self.image_size, in_channels=self.in_channels)
        self.widths, self.blocks = [int(w) for w in self.widths], [int(b) for b in self.blocks]
        if not self.widths or len(self.widths) != len(self.blocks):
            raise ValueError(
                f"widths {self.widths} and blocks {self.blocks} must be lists of the same, non-zero length "
                "(one entry per stage)"
            )
        if any(w <= 0 for w in self.widths) or any(b <= 0 for b in self.blocks):
            raise ValueError(f"widths {self.widths} and blocks {self.blocks} must be positive")
        if self.num_classes < 2:
            raise ValueError(f"num_classes must be >= 2 for a classifier, got {self.num_classes}")


CNN_PRESETS = {
    # He et al. 2016, section 4.2: 3 stages of 16/32/64 channels, n blocks each, 6n + 2 layers.
    "resnet8": dict(widths=[16, 32, 64], blocks=[1, 1, 1]),
    "resnet20": dict(widths=[16, 32, 64], blocks=[3, 3, 3]),
    # torchvision's resnet18 (11.2M parameters) with the 3x3 stride-1 stem and no max-pool.
    "resnet18": dict(widths=[64, 128, 256, 512], blocks=[2, 2, 2, 2]),
}


class CNN(ZooModel):
    model_type = "cnn"
    config_class = CNNConfig
    presets = CNN_PRESETS
    reads = "images"

    def __init__(self, config: CNNConfig) -> None:
        super().__init__(config)
        c = config
        width = c.widths[0]
        # torchvision's names (conv1, bn1, relu, layerN, avgpool, fc), so resnet18 weights map one to one.
        self.conv1 = nn.Conv2d(c.in_channels, width, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.Identity()  # torchvision's stride-2 max-pool would leave 7 px of a 28 px digit
        for i, (planes, n) in enumerate(zip(c.widths, c.blocks)):
            stride = 1 if i == 0 else 2
            self.add_module(f"layer{i + 1}", self._stage(width, planes, n, stride))
            width = planes
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(width, c.num_classes)
        self._init_weights()
        self._flops: float | None = None

    @staticmethod
    def _stage(inplanes: int, planes: int, n: int, stride: int) -> nn.Sequential:
        downsample = None
        if stride != 1 or inplanes != planes:  # the skip path needs the block's shape: a 1x1 conv + BN
            downsample = nn.Sequential(conv1x1(inplanes, planes, stride), nn.BatchNorm2d(planes))
        layers = [BasicBlock(inplanes, planes, stride, downsample)]
        layers += [BasicBlock(planes, planes) for _ in range(n - 1)]
        return nn.Sequential(*layers)

    def _init_weights(self) -> None:
        # torchvision's ResNet initialization: He (fan-out) convolutions, BN scale 1 and shift 0.
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    @property
    def stages(self) -> list[nn.Sequential]:
        return [getattr(self, f"layer{i + 1}") for i in range(len(self.config.widths))]

    def _check_images(self, images: torch.Tensor) -> None:
        c = self.config
        if images.dim() != 4 or images.shape[1] != c.in_channels:
            raise ValueError(
                f"expected images shaped (batch, {c.in_channels}, H, W), got {tuple(images.shape)}; the model was "
                f"built for in_channels={c.in_channels} (build it with the data's channel count)"
            )

    def forward_features(self, images: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) -> (B, widths[-1]) globally pooled features."""
        self._check_images(images)
        x = self.maxpool(self.relu(self.bn1(self.conv1(images))))
        for stage in self.stages:
            x = stage(x)
        return torch.flatten(self.avgpool(x), 1)

    def num_classes(self) -> int:
        return self.config.num_classes

    def pipeline_tag(self) -> str:
        return "image-classification"

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.fc(self.forward_features(images))

    def flops_per_image(self) -> float:
        """Training FLOPs per image (forward + backward = 3 x forward), counted once by torch's FlopCounterMode
        on one image of the configured size."""
        if self._flops is None:
            c = self.config
            param = next(self.parameters())
            image = torch.zeros(1, c.in_channels, c.image_size, c.image_size, device=param.device, dtype=param.dtype)
            was_training = self.training
            self.eval()  # no running-statistics update from the zero image
            try:
                with torch.no_grad(), FlopCounterMode(display=False) as counter:
                    self(image)
            finally:
                self.train(was_training)
            self._flops = 3.0 * counter.get_total_flops()
        return self._flops
