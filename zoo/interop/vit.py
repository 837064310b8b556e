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

from zoo.models.vit import ViT, grid_of, resample_position_table

from .hf_files import read_config, read_weights

# Heads of the published ViT widths (ViT-Ti/S/B/L/H); anything else must be told.
_HEADS_BY_WIDTH = {192: 3, 384: 6, 768: 12, 1024: 16, 1280: 16}
# timm architecture names ("vit_base_patch16_224.augreg_in21k") -> heads.
_HEADS_BY_TIMM_SIZE = {"tiny": 3, "small": 6, "base": 12, "large": 16, "huge": 16}

_BLOCK = {  # our suffix within a block -> timm's
    "norm1.weight": "norm1.weight",
    "norm1.bias": "norm1.bias",
    "self_attn.qkv.weight": "attn.qkv.weight",
    "self_attn.qkv.bias": "attn.qkv.bias",
    "self_attn.out.weight": "attn.proj.weight",
    "self_attn.out.bias": "attn.proj.bias",
    "norm2.weight": "norm2.weight",
    "norm2.bias": "norm2.bias",
    "ff.fc1.weight": "mlp.fc1.weight",
    "ff.fc1.bias": "mlp.fc1.bias",
    "ff.fc2.weight": "mlp.fc2.weight",
    "ff.fc2.bias": "mlp.fc2.bias",
}
_TORCHVISION_BLOCK = {
    "ln_1": "norm1",
    "ln_2": "norm2",
    "self_attention.in_proj_weight": "self_attn.qkv.weight",
    "self_attention.in_proj_bias": "self_attn.qkv.bias",
    "self_attention.out_proj": "self_attn.out",
    "mlp.0": "ff.fc1",
    "mlp.3": "ff.fc2",
    "mlp.linear_1": "ff.fc1",
    "mlp.linear_2": "ff.fc2",
}
_HF_BLOCK = {
    "layernorm_before": "norm1",
    "layernorm_after": "norm2",
    "attention.output.dense": "self_attn.out",
    "intermediate.dense": "ff.fc1",
    "output.dense": "ff.fc2",
}


# ---- helpers ---------------------------------------------------------------------------------------------------
def _is_square(n: int) -> bool:
    return n >= 0 and math.isqrt(n) ** 2 == n


def _heads(embed_dim: int, num_heads: int | None, source: str) -> int:
    if num_heads is not None:
        return num_heads
    if embed_dim in _HEADS_BY_WIDTH:
        return _HEADS_BY_WIDTH[embed_dim]
    raise ValueError(
        f"cannot tell the number of attention heads of this {source} ViT (width {embed_dim}) from its weights; "
        "pass num_heads=..."
    )


def _build(config: dict, state: dict[str, torch.Tensor], image_size: int | None, source: str) -> ViT:
    """Build a ViT from an inferred config and a zoo-named state dict, resampling the position table when the
    requested image size differs from the one the weights were trained at."""
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
    model = ViT.from_config_dict(config)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ValueError(f"{source} ViT weights do not match zoo's ViT: missing {missing}, unexpected {unexpected}")
    return model.eval()


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
    """A timm `VisionTransformer` state dict -> ViT. `fc_norm.weight` marks global average pooling."""
    sd = {k.removeprefix("module."): v for k, v in sd.items()}
    embed_dim, in_channels, patch = _patch_geometry(sd["patch_embed.proj.weight"], "timm")
    class_token = "cls_token" in sd
    prefix = int(class_token)
    rows = sd["pos_embed"].shape[1]
    if class_token and _is_square(rows) and not _is_square(rows - 1):
        raise ValueError("this timm ViT keeps no position for the class token (no_embed_class); zoo's ViT does")
    avg = "fc_norm.weight" in sd
    depth = _layer_count(sd, r"blocks\.(\d+)\.")
    config = (
        dict(
            image_size=grid_of(rows, prefix) * patch,
            patch_size=patch,
            in_channels=in_channels,
            num_classes=sd["head.weight"].shape[0] if "head.weight" in sd else 0,
            embed_dim=embed_dim,
            depth=depth,
            num_heads=_heads(embed_dim, num_heads, "timm"),
            mlp_dim=sd["blocks.0.mlp.fc1.weight"].shape[0],
            pool="avg" if avg else "token",
            class_token=class_token,
        )
        | overrides
    )
    ours_by_timm = {v: k for k, v in _BLOCK.items()}
    state: dict[str, torch.Tensor] = {}
    unknown = []
    for name, tensor in sd.items():
        if name == "cls_token":
            state["cls_token"] = tensor
        elif name == "pos_embed":
            state["pos_emb.weight"] = tensor[0]
        elif name.startswith("patch_embed.proj.") or name.startswith("head."):
            state[name] = tensor
        elif name in ("norm.weight", "norm.bias", "fc_norm.weight", "fc_norm.bias"):
            state[name.removeprefix("fc_")] = tensor
        elif (m := re.match(r"blocks\.(\d+)\.(.+)", name)) and m.group(2) in ours_by_timm:
            state[f"blocks.layers.{m.group(1)}.{ours_by_timm[m.group(2)]}"] = tensor
        else:
            unknown.append(name)
    if unknown:
        raise ValueError(
            "timm ViT weights use features zoo's ViT lacks (e.g. LayerScale, register tokens, a pre-norm): "
            f"{unknown[:6]}"
        )
    return _build(config, state, image_size, "timm")


# ---- torchvision -----------------------------------------------------------------------------------------------
def from_torchvision_state_dict(
    sd: dict[str, torch.Tensor], *, num_heads: int | None = None, image_size: int | None = None, **overrides
) -> ViT:
    """A `torchvision.models.VisionTransformer` state dict -> ViT (class token, no pre-logits layer)."""
    if any(k.startswith("heads.pre_logits") for k in sd):
        raise ValueError("torchvision ViT with representation_size (a pre-logits layer) is not supported")
    embed_dim, in_channels, patch = _patch_geometry(sd["conv_proj.weight"], "torchvision")
    rows = sd["encoder.pos_embedding"].shape[1]
    depth = _layer_count(sd, r"encoder\.layers\.encoder_layer_(\d+)\.")
    fc1 = next(
        v for k, v in sd.items() if re.fullmatch(r"encoder\.layers\.encoder_layer_0\.mlp\.(0|linear_1)\.weight", k)
    )
    config = (
        dict(
            image_size=grid_of(rows, 1) * patch,
            patch_size=patch,
            in_channels=in_channels,
            num_classes=sd["heads.head.weight"].shape[0],
            embed_dim=embed_dim,
            depth=depth,
            num_heads=_heads(embed_dim, num_heads, "torchvision"),
            mlp_dim=fc1.shape[0],
            pool="token",
        )
        | overrides
    )
    state: dict[str, torch.Tensor] = {}
    top = {
        "class_token": "cls_token",
        "conv_proj.weight": "patch_embed.proj.weight",
        "conv_proj.bias": "patch_embed.proj.bias",
        "encoder.ln.weight": "norm.weight",
        "encoder.ln.bias": "norm.bias",
        "heads.head.weight": "head.weight",
        "heads.head.bias": "head.bias",
    }
    for name, tensor in sd.items():
        if name in top:
            state[top[name]] = tensor
        elif name == "encoder.pos_embedding":
            state["pos_emb.weight"] = tensor[0]
        elif m := re.match(r"encoder\.layers\.encoder_layer_(\d+)\.(.+)", name):
            rest = m.group(2)
            for theirs, ours in _TORCHVISION_BLOCK.items():
                if rest == theirs or rest.startswith(theirs + "."):
                    state[f"blocks.layers.{m.group(1)}.{ours}{rest[len(theirs) :]}"] = tensor
                    break
            else:
                raise ValueError(f"unexpected tensor '{name}' in torchvision ViT weights")
        else:
            raise ValueError(f"unexpected tensor '{name}' in torchvision ViT weights")
    return _build(config, state, image_size, "torchvision")


# ---- Hugging Face ----------------------------------------------------------------------------------------------
_HF_V5_NAMES = (  # transformers 5 renames layers in memory; files keep the classic names, which we parse
    (r"^layers\.(\d+)\.", r"encoder.layer.\1."),
    (r"\.attention\.q_proj\.", ".attention.attention.query."),
    (r"\.attention\.k_proj\.", ".attention.attention.key."),
    (r"\.attention\.v_proj\.", ".attention.attention.value."),
    (r"\.attention\.o_proj\.", ".attention.output.dense."),
    (r"\.mlp\.fc1\.", ".intermediate.dense."),
    (r"\.mlp\.fc2\.", ".output.dense."),
)


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
    """HF ViTForImageClassification / ViTModel weights -> ViT (the registry entry of `load_hf`).

    A ViTModel has no classifier: the result then has num_classes=0 and returns pooled features. Its tanh pooler
    is not part of a classifier and is dropped."""
    config = config_from_hf(hf_config)
    if "classifier.weight" not in weights:
        config["num_classes"] = 0
    state: dict[str, torch.Tensor] = {}
    qkv: dict[str, dict[str, torch.Tensor]] = {}
    for name, tensor in weights.items():
        key = name.removeprefix("vit.")
        for pattern, replacement in _HF_V5_NAMES:
            key = re.sub(pattern, replacement, key)
        if key.startswith(("pooler.", "embeddings.mask_token")):
            continue
        if key == "embeddings.cls_token":
            state["cls_token"] = tensor
        elif key == "embeddings.position_embeddings":
            state["pos_emb.weight"] = tensor[0]
        elif key.startswith("embeddings.patch_embeddings.projection."):
            state["patch_embed.proj." + key.rsplit(".", 1)[1]] = tensor
        elif key.startswith("layernorm."):
            state["norm." + key.rsplit(".", 1)[1]] = tensor
        elif key.startswith("classifier."):
            state["head." + key.rsplit(".", 1)[1]] = tensor
        elif m := re.match(r"encoder\.layer\.(\d+)\.(.+)\.(weight|bias)$", key):
            index, module, kind = m.groups()
            if module.startswith("attention.attention."):
                qkv.setdefault(f"{index}.{kind}", {})[module.rsplit(".", 1)[1]] = tensor
            elif module in _HF_BLOCK:
                state[f"blocks.layers.{index}.{_HF_BLOCK[module]}.{kind}"] = tensor
            else:
                raise ValueError(f"unexpected tensor '{name}' in a Hugging Face ViT checkpoint")
        else:
            raise ValueError(f"unexpected tensor '{name}' in a Hugging Face ViT checkpoint")
    for slot, parts in qkv.items():
        index, kind = slot.split(".")
        if set(parts) != {"query", "key", "value"}:
            raise ValueError(f"layer {index} of the Hugging Face ViT lacks one of query/key/value {kind}")
        state[f"blocks.layers.{index}.self_attn.qkv.{kind}"] = torch.cat([parts["query"], parts["key"], parts["value"]])
    return _build(config, state, image_size, "Hugging Face")


def save(model: ViT) -> tuple[dict, dict[str, torch.Tensor]]:
    """ViT -> (config.json, weights) of a Hugging Face ViTForImageClassification."""
    c = model.config
    if c.norm != "layernorm" or c.pool != "token" or not c.class_token or c.num_classes == 0:
        raise ValueError("only a LayerNorm ViT with a class token, token pooling and a head exports to Hugging Face")
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
        "id2label": {str(i): f"LABEL_{i}" for i in range(c.num_classes)},
        "label2id": {f"LABEL_{i}": i for i in range(c.num_classes)},
    }
    hf_block = {v: k for k, v in _HF_BLOCK.items()}
    weights: dict[str, torch.Tensor] = {}
    for name, tensor in model.state_dict().items():
        if name == "cls_token":
            weights["vit.embeddings.cls_token"] = tensor
        elif name == "pos_emb.weight":
            weights["vit.embeddings.position_embeddings"] = tensor[None]
        elif name.startswith("patch_embed.proj."):
            weights["vit.embeddings.patch_embeddings.projection." + name.rsplit(".", 1)[1]] = tensor
        elif name.startswith("norm."):
            weights["vit.layernorm." + name.rsplit(".", 1)[1]] = tensor
        elif name.startswith("head."):
            weights["classifier." + name.rsplit(".", 1)[1]] = tensor
        else:
            _, _, index, module = name.split(".", 3)
            module, kind = module.rsplit(".", 1)
            prefix = f"vit.encoder.layer.{index}."
            if module == "self_attn.qkv":
                for part, chunk in zip(("query", "key", "value"), tensor.chunk(3)):
                    weights[f"{prefix}attention.attention.{part}.{kind}"] = chunk
            else:
                weights[f"{prefix}{hf_block[module]}.{kind}"] = tensor
    return config, weights


# ---- one entry point for files and directories -----------------------------------------------------------------
_WEIGHT_SUFFIXES = (".safetensors", ".pth", ".pt", ".bin")


def _read_file(path: Path) -> dict[str, torch.Tensor]:
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(path)
    if path.suffix not in _WEIGHT_SUFFIXES:
        raise ValueError(f"{path}: unknown weight file type '{path.suffix}'; use one of {', '.join(_WEIGHT_SUFFIXES)}")
    sd = torch.load(path, map_location="cpu", weights_only=True)
    for wrapper in ("state_dict", "model", "model_ema"):  # training checkpoints nest the weights
        if isinstance(sd, dict) and wrapper in sd and isinstance(sd[wrapper], dict):
            sd = sd[wrapper]
            break
    if not isinstance(sd, dict) or not all(isinstance(v, torch.Tensor) for v in sd.values()):
        raise ValueError(f"{path} does not hold a state dict of tensors")
    return sd


def _timm_heads_from_config(config: dict) -> int | None:
    arch = config.get("architecture", "")
    m = re.match(r"vit_(tiny|small|base|large|huge)_", arch)
    return _HEADS_BY_TIMM_SIZE[m.group(1)] if m else None


def load_vit(path: str | Path, *, num_heads: int | None = None, image_size: int | None = None, **overrides) -> ViT:
    """Load ViT weights saved by timm, torchvision or Hugging Face into zoo's ViT, in eval mode.

    path: a weight file (.safetensors, .pth, .pt, .bin: a timm or torchvision state dict), a Hugging Face
        checkpoint directory (config.json with model_type "vit"), or a timm hub directory (config.json with
        "architecture" beside model.safetensors / pytorch_model.bin).
    num_heads: needed only for widths that are not a published ViT's and carry no config.
    image_size: fine-tune/evaluate at another resolution; the position table is resampled bicubically.
    overrides: other ViTConfig fields (e.g. dropout, attn_impl).
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"ViT weights not found: {path.resolve()}")
    if path.is_dir():
        config = read_config(path)
        if config.get("model_type") == "vit":
            return load(config, read_weights(path), image_size=image_size)
        num_heads = num_heads or _timm_heads_from_config(config)
        sd = read_weights(path)
    else:
        sd = _read_file(path)
    if "patch_embed.proj.weight" in sd or "module.patch_embed.proj.weight" in sd:
        return from_timm_state_dict(sd, num_heads=num_heads, image_size=image_size, **overrides)
    if "conv_proj.weight" in sd:
        return from_torchvision_state_dict(sd, num_heads=num_heads, image_size=image_size, **overrides)
    hf_keys = [k for k in sd if "embeddings.patch_embeddings" in k]
    if hf_keys:
        raise ValueError(
            f"{path} holds Hugging Face ViT weights; load the checkpoint directory with its "
            "config.json (zoo.interop.load_hf) instead of the bare weight file"
        )
    raise ValueError(
        f"{path} does not look like timm, torchvision or Hugging Face ViT weights (first keys: {list(sd)[:4]})"
    )
