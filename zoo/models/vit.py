"""Vision Transformer (Dosovitskiy et al. 2021): patches -> pre-LN encoder -> class token (or mean) -> linear head.

Everything but the class token and the pooling comes from `zoo.core`. The state-dict layout (`cls_token`,
`pos_emb.weight`, `patch_embed.proj`, `blocks.layers.N`, `norm`, `head`) is converted to and from timm,
torchvision and Hugging Face by `zoo.interop.vit`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from zoo.core import (
    ACTIVATIONS,
    AttentionSwitches,
    BlockStack,
    BlockSwitches,
    CausalSwitch,
    ComputeOptions,
    LearnedPositionEmbedding,
    PatchEmbedding,
    apply_norm,
    check_choice,
    init_transformer_weights,
    make_norm,
)

from .base import ZooModel, check_heads_divide, check_positive, check_probability

POOLS = ("token", "avg")


@dataclass
class ViTConfig(AttentionSwitches, BlockSwitches, CausalSwitch, ComputeOptions):
    """ViT's sizes; the core's switches and options (zoo.core.switches) are inherited with ViT's defaults (its
    positions stay a learned table). norm="batchnorm" with ff_inner_norm="batchnorm" is BN-ViT ("Leveraging Batch
    Normalization for Vision Transformers", Yao et al. 2021: every LayerNorm becomes a BatchNorm and the FFN gets
    one between its layers; model=vit_bn); "batchnorm_masked" equals "batchnorm" here (no padding). `causal`
    attends over [class token,] patches in raster order and needs pool="avg" (a class token in front would see
    only itself)."""

    image_size: int = 224
    patch_size: int = 16
    in_channels: int = 3
    num_classes: int = 1000  # 0: no head, the model returns pooled features (timm's convention)
    embed_dim: int = 768
    depth: int = 12
    num_heads: int = 12
    mlp_dim: int = 3072
    dropout: float = 0.0  # on embeddings, residual branches and before the head
    attn_dropout: float = 0.0
    pool: str = "token"  # "token": the class token's output; "avg": mean of the patch tokens
    class_token: bool = True
    norm_eps: float = 1e-6  # timm, torchvision and the original JAX code use 1e-6
    # The FFN's activation: "gelu" (exact) is every reference ViT's; any other (e.g. "relu2", Primer's squared
    # ReLU) makes the model non-reference, see `ViT.nondefault_switches`.
    activation: str = "gelu"
    # False: an image whose size differs from image_size is an error. True: the position table is resampled
    # (bicubic) to the image's patch grid on the fly, as timm's dynamic_img_size does.
    dynamic_image_size: bool = False

    def __post_init__(self) -> None:
        check_positive(
            image_size=self.image_size,
            patch_size=self.patch_size,
            in_channels=self.in_channels,
            embed_dim=self.embed_dim,
            depth=self.depth,
            num_heads=self.num_heads,
            mlp_dim=self.mlp_dim,
        )
        if self.num_classes < 0:
            raise ValueError(f"num_classes must be >= 0 (0 drops the head), got {self.num_classes}")
        if self.image_size % self.patch_size:
            raise ValueError(
                f"image_size={self.image_size} is not divisible by patch_size={self.patch_size}; "
                "pick a patch size that tiles the image"
            )
        check_heads_divide(self, "embed_dim", "num_heads")
        check_probability(dropout=self.dropout, attn_dropout=self.attn_dropout)
        check_choice("pool", self.pool, POOLS)
        check_choice("activation", self.activation, ACTIVATIONS)
        self.check_core(d_model=self.embed_dim, n_heads=self.num_heads)
        if self.pool == "token" and not self.class_token:
            raise ValueError("pool='token' needs class_token=true; use pool='avg' for a model without a class token")
        if self.causal and self.pool == "token":
            raise ValueError(
                "causal=true with pool='token' would classify from the class token, which comes first and so sees "
                "only itself; use pool='avg'"
            )

    @property
    def grid_size(self) -> int:
        return self.image_size // self.patch_size


def _vit(embed_dim: int, depth: int, num_heads: int, patch_size: int = 16) -> dict:
    return dict(
        image_size=224,
        patch_size=patch_size,
        in_channels=3,
        num_classes=1000,
        embed_dim=embed_dim,
        depth=depth,
        num_heads=num_heads,
        mlp_dim=4 * embed_dim,
    )


VIT_PRESETS = {
    # The published ImageNet models (224 px, 1000 classes); names as in the DeiT / ViT papers.
    "vit-ti/16": _vit(192, 12, 3),
    "vit-s/16": _vit(384, 12, 6),
    "vit-b/16": _vit(768, 12, 12),
    "vit-b/32": _vit(768, 12, 12, patch_size=32),
    "vit-l/16": _vit(1024, 24, 16),
    "vit-h/14": _vit(1280, 32, 16, patch_size=14),
    # CPU sizes for 28-32 px images (MNIST, CIFAR-10) with 4x4 patches; image size, channels and classes
    # normally come from the data.
    "vit-nano/4": dict(
        image_size=32, patch_size=4, in_channels=3, num_classes=10, embed_dim=64, depth=4, num_heads=4, mlp_dim=128
    ),
    "vit-micro/4": dict(
        image_size=32, patch_size=4, in_channels=3, num_classes=10, embed_dim=96, depth=6, num_heads=3, mlp_dim=192
    ),
    "vit-mini/4": dict(
        image_size=32, patch_size=4, in_channels=3, num_classes=10, embed_dim=192, depth=6, num_heads=3, mlp_dim=384
    ),
}


def resample_position_table(
    table: torch.Tensor, old_grid: tuple[int, int], new_grid: tuple[int, int], num_prefix: int
) -> torch.Tensor:
    """Resize a (prefix + H*W, D) position table to another patch grid: the prefix rows (class token) are kept,
    the patch rows are treated as a D-channel H x W image and resampled bicubically with antialiasing (timm's
    choice, so that weights moved between timm and zoo resample identically)."""
    if tuple(old_grid) == tuple(new_grid):
        return table
    prefix, patches = table[:num_prefix], table[num_prefix:]
    if patches.shape[0] != old_grid[0] * old_grid[1]:
        raise ValueError(f"a position table of {patches.shape[0]} patch rows does not fit a {old_grid} grid")
    dim = table.shape[1]
    grid = patches.float().reshape(1, old_grid[0], old_grid[1], dim).permute(0, 3, 1, 2)
    grid = F.interpolate(grid, size=tuple(new_grid), mode="bicubic", antialias=True, align_corners=False)
    patches = grid.permute(0, 2, 3, 1).reshape(-1, dim).to(table.dtype)
    return torch.cat([prefix, patches], dim=0)


class ViT(ZooModel):
    model_type = "vit"
    config_class = ViTConfig
    presets = VIT_PRESETS
    reads = "images"
    hf_native = True

    def __init__(self, config: ViTConfig) -> None:
        super().__init__(config)
        c = config
        self.num_prefix_tokens = 1 if c.class_token else 0
        self.patch_embed = PatchEmbedding(c.image_size, c.patch_size, c.in_channels, c.embed_dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, c.embed_dim)) if c.class_token else None
        self.pos_emb = LearnedPositionEmbedding(self.num_prefix_tokens + c.grid_size**2, c.embed_dim)
        self.drop = nn.Dropout(c.dropout) if c.dropout else nn.Identity()
        self.blocks = BlockStack(
            c.depth,
            c.embed_dim,
            final_norm=False,  # ours below: before pooling for "token", after it for "avg" (timm's fc_norm)
            n_heads=c.num_heads,
            d_ff=c.mlp_dim,
            dropout=c.dropout,
            attn_dropout=c.attn_dropout,
            activation=c.activation,
            norm_first=True,
            norm_eps=c.norm_eps,
            **c.stack_options(),
        )
        self.norm = make_norm(c.norm, c.embed_dim, eps=c.norm_eps)
        self.head_drop = nn.Dropout(c.dropout) if c.dropout else nn.Identity()
        self.head = nn.Linear(c.embed_dim, c.num_classes) if c.num_classes else nn.Identity()
        self.apply(partial(init_transformer_weights, std=0.02))

    def nondefault_switches(self) -> dict:
        """As the base's, plus the activation: timm, torchvision and HF ViT all compute the exact GELU, and the
        exporters write that one whatever the config says. (GPT and BERT exports write their activation.)"""
        switches = super().nondefault_switches()
        if self.config.activation != "gelu":
            switches["activation"] = self.config.activation
        return switches

    def num_classes(self) -> int | None:
        return self.config.num_classes or None

    def pipeline_tag(self) -> str | None:
        return "image-classification" if self.config.num_classes else None

    def outside_native(self) -> dict:
        """ViTForImageClassification has a class token, token pooling and a head."""
        found, c = super().outside_native(), self.config
        if c.pool != "token" or not c.class_token:
            found |= {"pool": c.pool, "class_token": c.class_token}
        if not c.num_classes:
            found["num_classes"] = c.num_classes
        return found

    # ---- forward (timm's split: features, then head) -------------------------------------------------------
    def _check_images(self, images: torch.Tensor) -> tuple[int, int]:
        c = self.config
        if images.dim() != 4 or images.shape[1] != c.in_channels:
            raise ValueError(
                f"expected images shaped (batch, {c.in_channels}, {c.image_size}, {c.image_size}), got "
                f"{tuple(images.shape)}; the model was built for in_channels={c.in_channels} (convert the images, "
                "e.g. grayscale <-> RGB, or build the model with the data's channel count)"
            )
        h, w = images.shape[-2:]
        if (h, w) != (c.image_size, c.image_size):
            if not c.dynamic_image_size:
                raise ValueError(
                    f"image size {h}x{w} differs from the model's {c.image_size}x{c.image_size}; resize the images, "
                    "call model.set_image_size(...), or build the model with dynamic_image_size=true"
                )
            if h % c.patch_size or w % c.patch_size:
                raise ValueError(f"image size {h}x{w} is not divisible by the patch size {c.patch_size}")
        return h // c.patch_size, w // c.patch_size

    def _positions(self, grid: tuple[int, int]) -> torch.Tensor:
        table = self.pos_emb.weight
        own = (self.config.grid_size, self.config.grid_size)
        return resample_position_table(table, own, grid, self.num_prefix_tokens)

    def forward_features(self, images: torch.Tensor, *, class_token_only: bool = False) -> torch.Tensor:
        """(B, C, H, W) -> (B, prefix + patches, D): the encoder's output tokens (normalized for pool="token").

        class_token_only: return (B, 1, D), the class token's row, computing only that row in the last block.
        """
        grid = self._check_images(images)
        x = self.patch_embed(images)
        if self.cls_token is not None:
            x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        x = self.drop(x + self._positions(grid))
        x = self.blocks(x, is_causal=self.config.causal, n_outputs=1 if class_token_only else None)
        return apply_norm(self.norm, x, None) if self.config.pool == "token" else x

    def forward_head(self, tokens: torch.Tensor, *, pre_logits: bool = False) -> torch.Tensor:
        """(B, T, D) tokens -> (B, num_classes) logits, or the pooled (B, D) features with pre_logits=True."""
        if self.config.pool == "token":
            x = tokens[:, 0]
        else:
            x = self.norm(tokens[:, self.num_prefix_tokens :].mean(dim=1))
        x = self.head_drop(x)
        return x if pre_logits else self.head(x)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        c = self.config
        # Classifying from the class token reads one row of the last block: its attention query, projection
        # and MLP run for that row alone (the other rows are still its keys and values). That is ~1/7 of the
        # matmul work of a 6-block ViT saved, with the same logits. Batch norm in training would see other batch
        # statistics; in eval mode it is a fixed per-position map too.
        per_position = c.norm in ("layernorm", "none") and c.ff_inner_norm in (None, "layernorm")
        shortcut = c.pool == "token" and c.class_token and (per_position or not self.training)
        return self.forward_head(self.forward_features(images, class_token_only=shortcut))

    @classmethod
    def from_config_dict(cls, config: dict):
        """A recorded config. One written before `ff_inner_norm` existed (no such key) with norm="batchnorm" is a
        BN-ViT of that time, which always had the FFN BatchNorm: it keeps it, so its weights still load."""
        if config.get("norm") == "batchnorm" and "ff_inner_norm" not in config:
            config = {**config, "ff_inner_norm": "batchnorm"}
        return super().from_config_dict(config)

    # ---- resolution ------------------------------------------------------------------------------------------
    @torch.no_grad()
    def set_image_size(self, image_size: int) -> None:
        """Fine-tune or evaluate at another resolution: resample the learned position table to the new grid."""
        c = self.config
        if image_size <= 0 or image_size % c.patch_size:
            raise ValueError(f"image_size={image_size} must be a positive multiple of patch_size={c.patch_size}")
        new = image_size // c.patch_size
        table = resample_position_table(
            self.pos_emb.weight, (c.grid_size, c.grid_size), (new, new), self.num_prefix_tokens
        )
        self.pos_emb = LearnedPositionEmbedding(table.shape[0], c.embed_dim).to(table.device)
        self.pos_emb.weight.copy_(table)
        self.patch_embed.image_size, self.patch_embed.grid = image_size, new
        c.image_size = image_size

    # ---- inspection and optimization helpers ---------------------------------------------------------------
    @torch.no_grad()
    def attention_maps(self, images: torch.Tensor) -> list[torch.Tensor]:
        """The softmax attention of every layer, each (B, heads, T, T), from one forward pass in eval mode
        (the explicit attention path keeps them; the fast path is restored afterwards)."""
        attns = [layer.self_attn for layer in self.blocks.layers]
        was_training = self.training
        self.eval()
        try:
            for attn in attns:
                attn.record_weights = True
            self.forward_features(images)
            return [attn.last_weights.float() for attn in attns]
        finally:
            for attn in attns:
                attn.record_weights, attn.last_weights = False, None
            self.train(was_training)

    def no_weight_decay(self) -> set[str]:
        """Parameter names that are not matrices of a layer and should not decay (timm's convention)."""
        return {"cls_token", "pos_emb.weight"}

    def layer_index(self, name: str) -> int:
        """Depth of a parameter for layer-wise lr decay: 0 for the embeddings, i + 1 for block i, depth + 1 for
        the final norm and the head (BEiT / MAE fine-tuning)."""
        if name.startswith(("cls_token", "pos_emb", "patch_embed")):
            return 0
        if name.startswith("blocks.layers."):
            return int(name.split(".")[2]) + 1
        return self.config.depth + 1

    def flops_per_image(self) -> float:
        """Training FLOPs per image (forward + backward): 6 per weight per token plus attention (PaLM's estimate)."""
        c = self.config
        tokens = self.num_prefix_tokens + c.grid_size**2
        weights = self.num_parameters() - self.pos_emb.weight.numel()
        return tokens * (6 * weights + 12 * c.depth * c.embed_dim * tokens)


def grid_of(num_tokens: int, num_prefix: int) -> int:
    """The side of the square patch grid behind a position table of `num_tokens` rows."""
    side = math.isqrt(num_tokens - num_prefix)
    if side * side != num_tokens - num_prefix:
        raise ValueError(f"a position table of {num_tokens} rows ({num_prefix} prefix) is not a square grid")
    return side
