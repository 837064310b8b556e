"""TokenSpreadProbe: how far each block's output is from rank collapse (every position carrying the same vector).

Dong et al. 2021 ("Attention is Not All You Need: Pure Attention Loses Rank Doubly Exponentially with Depth") show
that a stack of self-attention layers without skip connections drives its output towards a matrix 1 x^T, the same
row at every position, doubly exponentially fast in depth; the skip connections (and, more weakly, the MLPs) stop it.
A language model whose positions all carry the same vector can predict no better than the unigram distribution.

On one real validation batch, in eval mode, at the start of training and every `every_n_steps` steps, for each
block's output X (positions x width) of each sequence: `probe/token_spread/<layer>` = ||X - 1 mean(X)||_F / ||X||_F,
averaged over the batch. The mean over positions is the rank-1 matrix nearest X in the Frobenius norm, so the value
is the fraction of X's norm that is not shared by all positions: about 1 for unrelated positions, 0 at full rank
collapse. Also `/mean` over the layers, and the series `token_spread_by_layer@init` / `@last` in depth order.
"""

from __future__ import annotations

import torch
from lightning.pytorch.utilities import rank_zero_info

from zoo.core.block import Block

from .batches import first_val_batch, forward_with_hooks
from .naming import layer_label
from .probes import _Probe, _with_mean


class TokenSpreadProbe(_Probe):
    _batch = None  # None: off (a model without zoo blocks)

    def on_train_start(self, trainer, pl_module) -> None:
        if not any(isinstance(m, Block) for m in pl_module.modules()):
            rank_zero_info(f"TokenSpreadProbe: {type(pl_module.net).__name__} has no zoo Block; nothing to probe")
            return
        self._batch = first_val_batch(trainer, pl_module)
        self._log(trainer, measure_token_spread(pl_module, self._batch))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self._batch is not None and self._due(trainer.global_step):
            self._log(trainer, measure_token_spread(pl_module, self._batch))

    def on_train_end(self, trainer, pl_module) -> None:
        if self._batch is not None and trainer.global_step not in self.history:
            self._log(trainer, measure_token_spread(pl_module, self._batch))

    def result_record(self) -> dict:
        return self._record_with_layer_series("token_spread_by_layer", "probe/token_spread/")


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
