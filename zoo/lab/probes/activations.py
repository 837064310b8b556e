"""ActivationProbe: how large each block's output is (`probe/act_rms/<layer>`, the residual stream's root mean
square) and how many FFN activations are exactly 0 (`probe/ffn_zero/<layer>`) or near it (`probe/ffn_near_zero`,
|a| < `near_zero`, an absolute threshold: GELU's small negative outputs count as "off" the way ReLU's zeros do), on
one validation batch; each with `/mean`, and the series `act_rms/mean` over the probe steps and
`act_rms_by_layer@init` / `@last`."""

from __future__ import annotations

import torch

from zoo.core.block import Block
from zoo.core.feedforward import FeedForward

from .batches import forward_with_hooks
from .naming import layer_label
from .probes import BatchProbe, _with_mean


class ActivationProbe(BatchProbe):
    series, series_prefix = "act_rms_by_layer", "probe/act_rms/"

    def __init__(self, every_n_steps: int = 100, near_zero: float = 1e-2) -> None:
        super().__init__(every_n_steps)
        if near_zero <= 0:
            raise ValueError(f"near_zero must be a positive threshold, got {near_zero}")
        self.near_zero = near_zero

    def measure(self, pl_module, batch) -> dict[str, float]:
        return measure_activations(pl_module, batch, self.near_zero)

    def result_record(self) -> dict:
        record = super().result_record()
        means = [r["probe/act_rms/mean"] for _, r in sorted(self.history.items()) if "probe/act_rms/mean" in r]
        if means:
            record["series"] = {"act_rms/mean": means, **record.get("series", {})}
        return record


@torch.no_grad()
def measure_activations(pl_module, batch, near_zero: float = 1e-2) -> dict[str, float]:
    """probe/act_rms, probe/ffn_zero and probe/ffn_near_zero per layer (and /mean) from one eval forward pass."""
    blocks = {layer_label(p): m for p, m in pl_module.named_modules() if isinstance(m, Block)}
    ffns = {layer_label(p): m for p, m in pl_module.named_modules() if isinstance(m, FeedForward)}
    if not blocks:
        raise ValueError(f"{type(pl_module).__name__} has no zoo Block whose activations could be probed")
    rms, zero, near = {}, {}, {}

    def block_hook(label):
        def hook(module, args, output):
            rms[label] = float(output.detach().double().square().mean().sqrt())

        return hook

    def act_hook(label):
        def hook(module, args, output):
            a = output.detach()
            zero[label] = float((a == 0).double().mean())
            near[label] = float((a.abs() < near_zero).double().mean())

        return hook

    handles = [m.register_forward_hook(block_hook(label)) for label, m in blocks.items()]
    handles += [m.act.register_forward_hook(act_hook(label)) for label, m in ffns.items()]
    forward_with_hooks(pl_module, batch, handles)
    values = _with_mean("probe/act_rms", rms)
    values.update(_with_mean("probe/ffn_zero", zero))
    values.update(_with_mean("probe/ffn_near_zero", near))
    return values
