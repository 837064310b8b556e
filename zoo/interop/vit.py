"""ViT weights from timm, torchvision and Hugging Face into zoo's ViT (and zoo's ViT out to Hugging Face).

All three references are the same pre-LN ViT; they differ in names, in whether Q/K/V are fused and in the
shape of the class token / position table. A state dict alone does not say how many heads a model has, so the
file loaders take `num_heads`, or read it from a config.json beside the weights, or fall back on the head count
every published ViT of that width uses.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import torch

from zoo.core.weights_file import torch_load_weights
from zoo.models.vit import ViT, grid_of, resample_position_table

from .hf_files import load_safetensors, read_config, read_weights
from .names import load_state, rename, rename_back

# Heads of the published ViT widths (ViT-Ti/S/B/L/H); anything else must be told.
_HEADS_BY_WIDTH = {192: 3, 384: 6, 768: 12, 1024: 16, 1280: 16}
# timm architecture names ("vit_base_patch16_224.augreg_in21k") -> heads.
_HEADS_BY_TIMM_SIZE = {"tiny": 3, "small": 6, "base": 12, "large": 16, "huge": 16}

_LAYER = "blocks.layers.{i}."  # zoo's names of a block's tensors start so
_TIMM = [
    ("cls_token", "cls_token"),
    ("pos_embed", "pos_emb.weight"),
    ("patch_embed.proj.{p}", "patch_embed.proj.{p}"),
    ("norm.{p}", "norm.{p}"),
    ("fc_norm.{p}", "norm.{p}"),
    ("head.{p}", "head.{p}"),
    ("blocks.{i}.norm1.{p}", _LAYER + "norm1.{p}"),
    ("blocks.{i}.attn.qkv.{p}", _LAYER + "self_attn.qkv.{p}"),
    ("blocks.{i}.attn.proj.{p}", _LAYER + "self_attn.out.{p}"),
    ("blocks.{i}.norm2.{p}", _LAYER + "norm2.{p}"),
    ("blocks.{i}.mlp.fc1.{p}", _LAYER + "ff.fc1.{p}"),
    ("blocks.{i}.mlp.fc2.{p}", _LAYER + "ff.fc2.{p}"),
]
_TV_LAYER = "encoder.layers.encoder_layer_{i}."
_TORCHVISION = [
    ("class_token", "cls_token"),
    ("encoder.pos_embedding", "pos_emb.weight"),
    ("conv_proj.{p}", "patch_embed.proj.{p}"),
    ("encoder.ln.{p}", "norm.{p}"),
    ("heads.head.{p}", "head.{p}"),
    (_TV_LAYER + "ln_1.{p}", _LAYER + "norm1.{p}"),
    (_TV_LAYER + "self_attention.in_proj_weight", _LAYER + "self_attn.qkv.weight"),
    (_TV_LAYER + "self_attention.in_proj_bias", _LAYER + "self_attn.qkv.bias"),
    (_TV_LAYER + "self_attention.out_proj.{p}", _LAYER + "self_attn.out.{p}"),
    (_TV_LAYER + "ln_2.{p}", _LAYER + "norm2.{p}"),
    (_TV_LAYER + "mlp.0.{p}", _LAYER + "ff.fc1.{p}"),
    (_TV_LAYER + "mlp.linear_1.{p}", _LAYER + "ff.fc1.{p}"),
    (_TV_LAYER + "mlp.3.{p}", _LAYER + "ff.fc2.{p}"),
    (_TV_LAYER + "mlp.linear_2.{p}", _LAYER + "ff.fc2.{p}"),
]
_HF_LAYER = "encoder.layer.{i}."
_HF = [  # below "vit."
    ("embeddings.cls_token", "cls_token"),
    ("embeddings.position_embeddings", "pos_emb.weight"),
    ("embeddings.patch_embeddings.projection.{p}", "patch_embed.proj.{p}"),
    ("layernorm.{p}", "norm.{p}"),
    ("classifier.{p}", "head.{p}"),
    (_HF_LAYER + "layernorm_before.{p}", _LAYER + "norm1.{p}"),
    (_HF_LAYER + "attention.attention.{qkv}.{p}", _LAYER + "self_attn.qkv.{p}"),
    (_HF_LAYER + "attention.output.dense.{p}", _LAYER + "self_attn.out.{p}"),
    (_HF_LAYER + "layernorm_after.{p}", _LAYER + "norm2.{p}"),
    (_HF_LAYER + "intermediate.dense.{p}", _LAYER + "ff.fc1.{p}"),
    (_HF_LAYER + "output.dense.{p}", _LAYER + "ff.fc2.{p}"),
    ("pooler.dense.{p}", None),  # a ViTModel's tanh pooler is no part of a classifier
    ("embeddings.mask_token", None),
]


# ---- helpers ---------------------------------------------------------------------------------------------------
def _heads(embed_dim: int, num_heads: int | None, source: str) -> int:
    if num_heads is not None:
        return num_heads
    if embed_dim in _HEADS_BY_WIDTH:
        return _HEADS_BY_WIDTH[embed_dim]
    raise ValueError(
        f"cannot tell the number of attention heads of this {source} ViT (width {embed_dim}) from its weights; "
        "pass num_heads=..."
    )


def _build(config: dict, weights: dict[str, torch.Tensor], rules, image_size: int | None, source: str) -> ViT:
    """Build a ViT from an inferred config and their weights, resampling the position table when the requested
    image size differs from the one the weights were trained at."""
    state = rename(weights, rules, f"{source} ViT weights")
    state["pos_emb.weight"] = state["pos_emb.weight"][0]  # (1, N, D) in all three
    trained_grid = config["image_size"] // config["patch_size"]
    if image_size is not None and image_size != config["image_size"]:
        if image_size % config["patch_size"]:
            raise ValueError(f"image_size={image_size} is not divisible by patch_size={config['patch_size']}")
        new_grid = image_size // config["patch_size"]
        prefix = 1 if config.get("class_token", True) else 0
        state["pos_emb.weight"] = resample_position_table(
            state["pos_emb.weight"], (trained_grid, trained_grid), (new_grid, new_grid), prefix
        )
        config = dict(config, image_size=image_size)
    return load_state(ViT.from_config_dict(config), state, f"{source} ViT weights").eval()


def _layer_count(keys, pattern: str) -> int:
    found = {int(m.group(1)) for k in keys if (m := re.match(pattern, k))}
    if not found:
        raise ValueError("no encoder layers found in the ViT weights")
    return max(found) + 1


def _patch_geometry(weight: torch.Tensor, source: str) -> tuple[int, int, int]:
    embed_dim, in_channels, ph, pw = weight.shape
    if ph != pw:
        raise ValueError(f"{source} ViT has non-square {ph}x{pw} patches; zoo's ViT uses square patches")
    return embed_dim, in_channels, ph


# ---- timm ------------------------------------------------------------------------------------------------------
def from_timm_state_dict(
    sd: dict[str, torch.Tensor], *, num_heads: int | None = None, image_size: int | None = None, **overrides
) -> ViT:
    """A timm `VisionTransformer` state dict -> ViT. `fc_norm.weight` marks global average pooling. A tensor of a
    feature zoo's ViT lacks (LayerScale, register tokens, a pre-norm) is refused by name."""
    sd = {k.removeprefix("module."): v for k, v in sd.items()}
    embed_dim, in_channels, patch = _patch_geometry(sd["patch_embed.proj.weight"], "timm")
    class_token = "cls_token" in sd
    rows = sd["pos_embed"].shape[1]
    if class_token and math.isqrt(rows) ** 2 == rows and math.isqrt(rows - 1) ** 2 != rows - 1:
        raise ValueError("this timm ViT keeps no position for the class token (no_embed_class); zoo's ViT does")
    config = dict(
        image_size=grid_of(rows, int(class_token)) * patch,
        patch_size=patch,
        in_channels=in_channels,
        num_classes=sd["head.weight"].shape[0] if "head.weight" in sd else 0,
        embed_dim=embed_dim,
        depth=_layer_count(sd, r"blocks\.(\d+)\."),
        num_heads=_heads(embed_dim, num_heads, "timm"),
        mlp_dim=sd["blocks.0.mlp.fc1.weight"].shape[0],
        pool="avg" if "fc_norm.weight" in sd else "token",
        class_token=class_token,
    )
    return _build(config | overrides, sd, _TIMM, image_size, "timm")


# ---- torchvision -----------------------------------------------------------------------------------------------
def from_torchvision_state_dict(
    sd: dict[str, torch.Tensor], *, num_heads: int | None = None, image_size: int | None = None, **overrides
) -> ViT:
    """A `torchvision.models.VisionTransformer` state dict -> ViT (class token, no pre-logits layer)."""
    if any(k.startswith("heads.pre_logits") for k in sd):
        raise ValueError("torchvision ViT with representation_size (a pre-logits layer) is not supported")
    embed_dim, in_channels, patch = _patch_geometry(sd["conv_proj.weight"], "torchvision")
    fc1 = next(
        v for k, v in sd.items() if re.fullmatch(r"encoder\.layers\.encoder_layer_0\.mlp\.(0|linear_1)\.weight", k)
    )
    config = dict(
        image_size=grid_of(sd["encoder.pos_embedding"].shape[1], 1) * patch,
        patch_size=patch,
        in_channels=in_channels,
        num_classes=sd["heads.head.weight"].shape[0],
        embed_dim=embed_dim,
        depth=_layer_count(sd, r"encoder\.layers\.encoder_layer_(\d+)\."),
        num_heads=_heads(embed_dim, num_heads, "torchvision"),
        mlp_dim=fc1.shape[0],
        pool="token",
    )
    return _build(config | overrides, sd, _TORCHVISION, image_size, "torchvision")


# ---- Hugging Face ----------------------------------------------------------------------------------------------
def config_from_hf(hf: dict) -> dict:
    if hf.get("hidden_act", "gelu") != "gelu":
        raise ValueError(f"HF ViT hidden_act '{hf.get('hidden_act')}' is not supported; zoo's ViT uses exact GELU")
    if not hf.get("qkv_bias", True):
        raise ValueError("HF ViT with qkv_bias=false is not supported; zoo's ViT has Q/K/V biases")
    labels = hf.get("id2label")
    return dict(
        image_size=hf.get("image_size", 224),
        patch_size=hf.get("patch_size", 16),
        in_channels=hf.get("num_channels", 3),
        num_classes=len(labels) if labels else hf.get("num_labels", 2),
        embed_dim=hf["hidden_size"],
        depth=hf["num_hidden_layers"],
        num_heads=hf["num_attention_heads"],
        mlp_dim=hf["intermediate_size"],
        dropout=hf.get("hidden_dropout_prob", 0.0),
        attn_dropout=hf.get("attention_probs_dropout_prob", 0.0),
        norm_eps=hf.get("layer_norm_eps", 1e-12),
    )


def load(hf_config: dict, weights: dict[str, torch.Tensor], *, image_size: int | None = None) -> ViT:
    """HF ViTForImageClassification / ViTModel weights -> ViT (the registry entry of `load_hf`). A ViTModel has no
    classifier: the result then has num_classes=0 and returns pooled features."""
    config = config_from_hf(hf_config)
    if "classifier.weight" not in weights:
        config["num_classes"] = 0
    weights = {k.removeprefix("vit."): v for k, v in weights.items()}
    return _build(config, weights, _HF, image_size, "Hugging Face")


def save(model: ViT) -> tuple[dict, dict[str, torch.Tensor]]:
    """ViT -> (config.json, weights) of a Hugging Face ViTForImageClassification."""
    c = model.config
    config = {
        "architectures": ["ViTForImageClassification"],
        "model_type": "vit",
        "hidden_size": c.embed_dim,
        "num_hidden_layers": c.depth,
        "num_attention_heads": c.num_heads,
        "intermediate_size": c.mlp_dim,
        "hidden_act": "gelu",
        "hidden_dropout_prob": c.dropout,
        "attention_probs_dropout_prob": c.attn_dropout,
        "layer_norm_eps": c.norm_eps,
        "image_size": c.image_size,
        "patch_size": c.patch_size,
        "num_channels": c.in_channels,
        "qkv_bias": True,
        "encoder_stride": c.patch_size,
    }
    state = model.state_dict()
    weights = rename_back(state | {"pos_emb.weight": state["pos_emb.weight"][None]}, _HF)
    return config, {k if k.startswith("classifier.") else f"vit.{k}": v for k, v in weights.items()}


# ---- one entry point for files and directories -----------------------------------------------------------------
_WEIGHT_SUFFIXES = (".safetensors", ".pth", ".pt", ".bin")


def _read_file(path: Path) -> dict[str, torch.Tensor]:
    if path.suffix not in _WEIGHT_SUFFIXES:
        raise ValueError(f"{path}: unknown weight file type '{path.suffix}'; use one of {', '.join(_WEIGHT_SUFFIXES)}")
    if path.suffix == ".safetensors":
        return load_safetensors(path)
    sd = torch_load_weights(path)
    for wrapper in ("state_dict", "model", "model_ema"):  # training checkpoints nest the weights
        if isinstance(sd, dict) and isinstance(sd.get(wrapper), dict):
            sd = sd[wrapper]
            break
    if not isinstance(sd, dict) or not all(isinstance(v, torch.Tensor) for v in sd.values()):
        raise ValueError(f"{path} does not hold a state dict of tensors")
    return sd


def load_vit(path: str | Path, *, num_heads: int | None = None, image_size: int | None = None, **overrides) -> ViT:
    """Load ViT weights saved by timm, torchvision or Hugging Face into zoo's ViT, in eval mode. path: a weight file
    (a timm or torchvision state dict), a Hugging Face directory or a timm hub directory. num_heads: for widths no
    published ViT has. image_size: another resolution (positions resampled). overrides: other ViTConfig fields."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"ViT weights not found: {path.resolve()}")
    if path.is_dir():
        config = read_config(path)
        if config.get("model_type") == "vit":
            return load(config, read_weights(path), image_size=image_size)
        size = re.match(r"vit_(tiny|small|base|large|huge)_", config.get("architecture", ""))
        num_heads = num_heads or (_HEADS_BY_TIMM_SIZE[size[1]] if size else None)
        sd = read_weights(path)
    else:
        sd = _read_file(path)
    if "patch_embed.proj.weight" in sd or "module.patch_embed.proj.weight" in sd:
        return from_timm_state_dict(sd, num_heads=num_heads, image_size=image_size, **overrides)
    if "conv_proj.weight" in sd:
        return from_torchvision_state_dict(sd, num_heads=num_heads, image_size=image_size, **overrides)
    if any("embeddings.patch_embeddings" in k for k in sd):
        raise ValueError(
            f"{path} holds Hugging Face ViT weights; load the checkpoint directory with its "
            "config.json (zoo.interop.load_hf) instead of the bare weight file"
        )
    raise ValueError(
        f"{path} does not look like timm, torchvision or Hugging Face ViT weights (first keys: {list(sd)[:4]})"
    )
