"""ActivationProbe: how large the activations of each block are, and how many FFN activations are (near) zero.

On one real validation batch, in eval mode, at the start of training and every `every_n_steps` steps:
- `probe/act_rms/<layer>`: the root mean square of block <layer>'s output (the residual stream it hands on), over
  every position of the batch. Without normalization this is what grows (or shrinks) with depth and training.
- `probe/ffn_zero/<layer>`: the fraction of the FFN's activations (the output of its nonlinearity, the input of
  its second linear layer) that are exactly 0; `probe/ffn_near_zero/<layer>`: the fraction with |a| < `near_zero`
  (default 1e-2, an absolute threshold: at GPT's initialization the pre-activations have a scale of ~0.2, so this
  counts GELU's small negative outputs as "off" the way ReLU's zeros are).
Each with `/mean` over the layers. Series for the report: `act_rms/mean` over the probe steps, and
`act_rms_by_layer@init` / `@last` (one value per block, in depth order).
"""

from __future__ import annotations

import torch
from lightning.pytorch.utilities import rank_zero_info

from zoo.core.block import Block
from zoo.core.feedforward import FeedForward

from .batches import first_val_batch, forward_with_hooks
from .naming import layer_label
from .probes import _Probe, _with_mean, layers_in_order


class ActivationProbe(_Probe):
    def __init__(self, every_n_steps: int = 100, near_zero: float = 1e-2) -> None:
        super().__init__(every_n_steps)
        if near_zero <= 0:
            raise ValueError(f"near_zero must be a positive threshold, got {near_zero}")
        self.near_zero = near_zero

    _batch = None  # None: off (a model without zoo blocks, e.g. the CNN baseline)

    def on_train_start(self, trainer, pl_module) -> None:
        if not any(isinstance(m, Block) for m in pl_module.modules()):
            rank_zero_info(f"ActivationProbe: {type(pl_module.net).__name__} has no zoo Block; nothing to probe")
            return
        self._batch = first_val_batch(trainer, pl_module)
        self._log(trainer, measure_activations(pl_module, self._batch, self.near_zero))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self._batch is not None and self._due(trainer.global_step):
            self._log(trainer, measure_activations(pl_module, self._batch, self.near_zero))

    def on_train_end(self, trainer, pl_module) -> None:
        if self._batch is not None and trainer.global_step not in self.history:
            self._log(trainer, measure_activations(pl_module, self._batch, self.near_zero))

    def result_record(self) -> dict:
        record = super().result_record()
        steps = sorted(self.history)
        rows = [self.history[s] for s in steps]
        series = {"act_rms/mean": [r["probe/act_rms/mean"] for r in rows if "probe/act_rms/mean" in r]}
        if steps and steps[0] == 0:
            series["act_rms_by_layer@init"] = layers_in_order(rows[0], "probe/act_rms/")
        if steps:
            series["act_rms_by_layer@last"] = layers_in_order(rows[-1], "probe/act_rms/")
        record["series"] = {k: v for k, v in series.items() if v}
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
