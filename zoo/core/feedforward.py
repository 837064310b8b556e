"""Position-wise feed-forward network: Linear -> activation -> Linear -> dropout."""

from __future__ import annotations

import torch
from torch import nn

from .norms import apply_norm, make_norm


class SquaredReLU(nn.Module):
    """relu(x) ** 2, the feed-forward activation of Primer (So et al. 2021, "Searching for Efficient Transformers
    for Language Modeling"), which found it to reach a given LM quality in fewer steps than GELU or ReLU."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x).square()


# "gelu" is the exact erf GELU (BERT, ViT); "gelu_tanh" is the tanh approximation GPT-2 was trained with;
# "relu2" is Primer's squared ReLU.
ACTIVATIONS = {
    "relu": nn.ReLU,
    "gelu": nn.GELU,
    "gelu_tanh": lambda: nn.GELU(approximate="tanh"),
    "relu2": SquaredReLU,
}


class FeedForward(nn.Module):
    def __init__(
        self,
        d_model: int,
        d_ff: int,
        *,
        activation: str = "gelu",
        dropout: float = 0.0,
        inner_dropout: float = 0.0,
        bias: bool = True,
        inner_norm: str | None = None,
        norm_eps: float = 1e-5,
    ) -> None:
        """inner_dropout: dropout after the activation (torch.nn.Transformer has it; GPT-2 and BERT do not).
        inner_norm: a norm between the two layers (the BatchNorm ViT variant puts a BatchNorm there), one of
        `norms.FF_INNER_NORMS`."""
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation '{activation}'; choose one of {', '.join(ACTIVATIONS)}")
        if d_ff <= 0:
            raise ValueError(f"d_ff must be positive, got {d_ff}")
        self.fc1 = nn.Linear(d_model, d_ff, bias=bias)
        self.act = ACTIVATIONS[activation]()
        self.inner_norm = make_norm(inner_norm, d_ff, eps=norm_eps) if inner_norm else nn.Identity()
        self.masked_inner_norm = inner_norm == "batchnorm_masked"  # see norms.apply_norm
        self.inner_dropout = nn.Dropout(inner_dropout) if inner_dropout else nn.Identity()
        self.fc2 = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout) if dropout else nn.Identity()

    def forward(self, x: torch.Tensor, token_mask: torch.Tensor | None = None) -> torch.Tensor:
        """token_mask: (B, T) bool, True at real tokens; only a masked BatchNorm inside uses it."""
        h = apply_norm(self.inner_norm, self.fc1(x), token_mask, masked=self.masked_inner_norm)
        return self.dropout(self.fc2(self.inner_dropout(self.act(h))))
