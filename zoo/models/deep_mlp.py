"""He et al. 2016's Figure 1 at MNIST scale: a plain and a residual network of the same layers, at several depths.

`DeepMLP` is a fully connected ReLU network with BatchNorm after every hidden weight layer (He et al.'s plain nets
use BN too, section 3.4, which is why their section 4.1 rules out vanishing gradients as the cause of degradation).
A net of `depth` weight layers is a stem (flattened image -> width), (depth - 2) / 2 blocks of two layers and a
linear head. A block computes relu(F(x) + x) with a shortcut and relu(F(x)) without one, where
F(x) = BN(W2 relu(BN(W1 x))): the two arms have exactly the same parameters, and the shortcut adds nothing to
learn (He et al. section 3.1, identity shortcuts). The blocks live in `layers`, so the lab's gradient probe reports
each one (`probe/grad/l<i>`, `probe/grad/first_over_last`) as it does for a Transformer's blocks. Its fit on the
training and held-out images is measured by the lab's `FitErrorProbe` (zoo/lab/probes/fit_error.py).

An MLP rather than a CNN: its deepest arm must fit a 2-core CPU budget of seconds per job, and the degradation
claim is about depth and optimization, not about convolutions.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .base import ZooModel, check_positive


@dataclass
class DeepMLPConfig:
    depth: int = 10  # weight layers: the stem, 2 per block, the head (He et al. count layers this way)
    width: int = 128
    shortcut: bool = True  # identity shortcut around every block (False: the plain net)
    image_size: int = 28  # image size, channels and classes: the data's (train.py fills them in)
    in_channels: int = 1
    num_classes: int = 10

    def __post_init__(self) -> None:
        check_positive(depth=self.depth, width=self.width, image_size=self.image_size, in_channels=self.in_channels)
        if self.depth < 4 or self.depth % 2:
            raise ValueError(
                f"depth must be an even number of weight layers >= 4 (stem + blocks of 2 + head), got {self.depth}"
            )
        if not isinstance(self.shortcut, bool):
            raise ValueError(f"shortcut must be true or false, got {self.shortcut!r}")
        if self.num_classes < 2:
            raise ValueError(f"num_classes must be >= 2 for a classifier, got {self.num_classes}")


class ResidualBlock(nn.Module):
    """Two weight layers, relu(F(x) + x) or, without the shortcut, relu(F(x)) (He et al. 2016, Figure 2)."""

    def __init__(self, width: int, shortcut: bool) -> None:
        super().__init__()
        self.shortcut = shortcut
        # No biases: each linear layer is followed by a BatchNorm whose shift does the same job.
        self.fc1 = nn.Linear(width, width, bias=False)
        self.norm1 = nn.BatchNorm1d(width)
        self.fc2 = nn.Linear(width, width, bias=False)
        self.norm2 = nn.BatchNorm1d(width)
        self.relu = nn.ReLU()

    def branch(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm2(self.fc2(self.relu(self.norm1(self.fc1(x)))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.branch(x)
        return self.relu(out + x if self.shortcut else out)


class DeepMLP(ZooModel):
    model_type = "deep_mlp"
    config_class = DeepMLPConfig
    presets = {"mlp": {}}
    reads = "images"

    def __init__(self, config: DeepMLPConfig) -> None:
        super().__init__(config)
        c = config
        pixels = c.in_channels * c.image_size * c.image_size
        self.stem = nn.Sequential(
            nn.Flatten(), nn.Linear(pixels, c.width, bias=False), nn.BatchNorm1d(c.width), nn.ReLU()
        )
        self.layers = nn.ModuleList(ResidualBlock(c.width, c.shortcut) for _ in range((c.depth - 2) // 2))
        self.head = nn.Linear(c.width, c.num_classes)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                # He initialization (fan-in, for ReLU), as He et al. 2016 train both their plain and residual nets.
                nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    def num_classes(self) -> int:
        return self.config.num_classes

    def pipeline_tag(self) -> str:
        return "image-classification"

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        c = self.config
        if images.dim() != 4 or images.shape[1:] != (c.in_channels, c.image_size, c.image_size):
            raise ValueError(
                f"expected images shaped (batch, {c.in_channels}, {c.image_size}, {c.image_size}), got "
                f"{tuple(images.shape)}: the MLP has one input weight per pixel of the configured size"
            )
        x = self.stem(images)
        for block in self.layers:
            x = block(x)
        return self.head(x)
