"""Optimizer parameter groups: which tensors are weight-decayed, and (for fine-tuning) the lr scale of each depth."""

from __future__ import annotations

from torch import nn


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Decay the matrices (linear and embedding weights); never decay biases and norm scales (1-D tensors), nor
    the tensors the model lists in `no_weight_decay()` (timm's convention: ViT's class token and positions)."""
    skip = set(model.no_weight_decay()) if hasattr(model, "no_weight_decay") else set()
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if param.requires_grad:
            (no_decay if param.dim() < 2 or name in skip else decay).append(param)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def layer_decay_groups(model: nn.Module, weight_decay: float, layer_decay: float) -> list[dict]:
    """Layer-wise lr decay (BEiT / MAE fine-tuning): with `model.layer_index(name)` numbering the depth from 0
    (embeddings) to L + 1 (the head), a tensor at depth d trains at lr * layer_decay^(L + 1 - d). One group per
    (depth, decays) carrying its `lr_scale`, which the task multiplies into the group's lr."""
    skip = set(model.no_weight_decay()) if hasattr(model, "no_weight_decay") else set()
    names = [name for name, _ in model.named_parameters()]
    top = max(model.layer_index(name) for name in names)
    groups: dict[tuple[int, bool], dict] = {}
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        no_decay = param.dim() < 2 or name in skip
        depth = model.layer_index(name)
        group = groups.setdefault(
            (depth, no_decay),
            {
                "params": [],
                "weight_decay": 0.0 if no_decay else weight_decay,
                "lr_scale": layer_decay ** (top - depth),
            },
        )
        group["params"].append(param)
    return list(groups.values())
