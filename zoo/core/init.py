"""Weight initialization shared by the models (the GPT-2/BERT scheme)."""

from __future__ import annotations

import math

from torch import nn


def init_transformer_weights(module: nn.Module, std: float = 0.02) -> None:
    """Normal(0, std) for linear, embedding and patch-projection weights, zero biases, unit norms.

    Use as `model.apply(partial(init_transformer_weights, std=0.02))`."""
    if isinstance(module, (nn.Linear, nn.Conv2d)):
        nn.init.normal_(module.weight, mean=0.0, std=std)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, mean=0.0, std=std)
        if module.padding_idx is not None:
            module.weight.data[module.padding_idx].zero_()
    elif isinstance(module, (nn.LayerNorm, nn.BatchNorm1d)):
        if module.weight is not None:
            nn.init.ones_(module.weight)
        if module.bias is not None:
            nn.init.zeros_(module.bias)


def scale_residual_projections(model: nn.Module, n_layers: int, std: float = 0.02) -> None:
    """GPT-2: the projections that write into the residual stream get std / sqrt(2 * n_layers), so the
    variance of the stream does not grow with depth."""
    for name, param in model.named_parameters():
        if name.endswith("self_attn.out.weight") or name.endswith("ff.fc2.weight"):
            nn.init.normal_(param, mean=0.0, std=std / math.sqrt(2 * n_layers))
