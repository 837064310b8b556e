"""A transformer-zoo ViT for `transformers` (trust_remote_code=True): AutoConfig and
AutoModelForImageClassification (AutoModel for a model without a head).

Written by transformer-zoo's exporter; it needs torch and transformers only. Parameter names are zoo's ViT's
(zoo/models/vit.py): patch_embed.proj, cls_token, pos_emb, blocks, norm, head. It computes the lab's switches
(zoo_layers.py) and the pooling options: the class token, or the mean of the patch tokens (pool=avg, with or
without a class token)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import ImageClassifierOutput

from .zoo_config import BLOCK_SWITCH_DEFAULTS, ZooConfig
from .zoo_layers import BlockStack, make_norm

VIT_DEFAULTS = dict(
    image_size=224,
    patch_size=16,
    in_channels=3,
    num_classes=1000,
    embed_dim=768,
    depth=12,
    num_heads=12,
    mlp_dim=3072,
    pool="token",
    class_token=True,
    norm_eps=1e-6,
    activation="gelu",
    dynamic_image_size=False,
    causal=False,
    **BLOCK_SWITCH_DEFAULTS,
)


class ZooViTConfig(ZooConfig):
    model_type = "zoo_vit"
    defaults = VIT_DEFAULTS
    sizes = dict(zoo_width="embed_dim", zoo_heads="num_heads", zoo_ff="mlp_dim", zoo_eps="norm_eps")
    bias = True  # zoo's ViT always has biases


class ZooViTForImageClassification(PreTrainedModel):
    config_class = ZooViTConfig
    base_model_prefix = "zoo_vit"
    main_input_name = "pixel_values"

    def __init__(self, config):
        super().__init__(config)
        c = config
        grid = c.image_size // c.patch_size
        self.prefix = 1 if c.class_token else 0
        self.patch_embed = nn.Module()
        self.patch_embed.proj = nn.Conv2d(c.in_channels, c.embed_dim, kernel_size=c.patch_size, stride=c.patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, c.embed_dim)) if c.class_token else None
        self.pos_emb = nn.Embedding(self.prefix + grid * grid, c.embed_dim)
        self.blocks = BlockStack(c, c.depth, norm_first=True, final_norm=False)
        self.norm = make_norm(c.norm, c.embed_dim, c.norm_eps)
        self.head = nn.Linear(c.embed_dim, c.num_classes) if c.num_classes else nn.Identity()
        self.post_init()

    def _positions(self, grid):
        """The position table, resampled (bicubic, antialiased, as zoo and timm do) to another patch grid when
        dynamic_image_size allows other image sizes."""
        c, table = self.config, self.pos_emb.weight
        own = c.image_size // c.patch_size
        if grid == (own, own):
            return table
        prefix, patches = table[: self.prefix], table[self.prefix :]
        image = patches.float().reshape(1, own, own, -1).permute(0, 3, 1, 2)
        image = F.interpolate(image, size=grid, mode="bicubic", antialias=True, align_corners=False)
        return torch.cat([prefix, image.permute(0, 2, 3, 1).reshape(-1, table.shape[1]).to(table.dtype)])

    def forward(self, pixel_values, labels=None, **unused):
        """pixel_values (B, C, H, W), normalized as in training (the export's image processor does it) -> logits
        (B, num_classes), or the pooled features (B, D) of a model without a head; with labels also the loss."""
        c = self.config
        if pixel_values.dim() != 4 or pixel_values.shape[1] != c.in_channels:
            raise ValueError(
                f"expected pixel_values shaped (batch, {c.in_channels}, {c.image_size}, {c.image_size}), got "
                f"{tuple(pixel_values.shape)}; the image processor of this directory prepares them"
            )
        h, w = pixel_values.shape[-2:]
        if (h, w) != (c.image_size, c.image_size) and not c.dynamic_image_size or h % c.patch_size or w % c.patch_size:
            raise ValueError(
                f"image size {h}x{w} does not fit the model's {c.image_size}x{c.image_size} (patches of "
                f"{c.patch_size}); resize the images (the image processor of this directory does)"
            )
        x = self.patch_embed.proj(pixel_values).flatten(2).transpose(1, 2)
        if self.cls_token is not None:
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        x = self.blocks(x + self._positions((h // c.patch_size, w // c.patch_size)), causal=c.causal)
        pooled = self.norm(x[:, 0]) if c.pool == "token" else self.norm(x[:, self.prefix :].mean(dim=1))
        logits = self.head(pooled)
        loss = None if labels is None or not c.num_classes else F.cross_entropy(logits, labels)
        return ImageClassifierOutput(loss=loss, logits=logits)
