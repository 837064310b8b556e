"""TokenSpreadProbe: how far each block's output is from rank collapse (every position carrying the same vector;
Dong et al. 2021: pure attention loses rank doubly exponentially with depth, skip connections stop it).

`probe/token_spread/<layer>` = ||X - 1 mean(X)||_F / ||X||_F for each block's output X (positions x width) on one
validation batch, averaged over the batch: about 1 for unrelated positions, 0 at full rank collapse; with `/mean`
over the layers and the series `token_spread_by_layer@init` / `@last`."""

from __future__ import annotations

import torch

from zoo.core.block import Block

from .batches import forward_with_hooks
from .naming import layer_label
from .probes import BatchProbe, _with_mean


class TokenSpreadProbe(BatchProbe):
    series, series_prefix = "token_spread_by_layer", "probe/token_spread/"

    def measure(self, pl_module, batch) -> dict[str, float]:
        return measure_token_spread(pl_module, batch)


def token_spread(x: torch.Tensor) -> float:
    """Mean over the batch of ||X - 1 mean(X)||_F / ||X||_F for X = x[b] (positions x width); x is (B, T, C)."""
    if x.dim() != 3:
        raise ValueError(f"token_spread takes (batch, positions, width), got shape {tuple(x.shape)}")
    x = x.detach().double()
    centred = x - x.mean(dim=1, keepdim=True)
    ratio = centred.flatten(1).norm(dim=1) / x.flatten(1).norm(dim=1).clamp_min(1e-300)
    return float(ratio.mean())


@torch.no_grad()
def measure_token_spread(pl_module, batch) -> dict[str, float]:
    """probe/token_spread/<layer> (and /mean) from one eval forward pass."""
    blocks = {layer_label(p): m for p, m in pl_module.named_modules() if isinstance(m, Block)}
    if not blocks:
        raise ValueError(f"{type(pl_module).__name__} has no zoo Block whose outputs could be probed")
    spread: dict[str, float] = {}

    def hook(label):
        def record(module, args, output):
            spread[label] = token_spread(output[0] if isinstance(output, tuple) else output)

        return record

    handles = [m.register_forward_hook(hook(label)) for label, m in blocks.items()]
    forward_with_hooks(pl_module, batch, handles)
    return _with_mean("probe/token_spread", spread)
