"""BatchNormStatsProbe: how much the batch statistics of each BatchNorm layer fluctuate during training.

Shen et al. 2020 ("Rethinking Batch Normalization in Transformers", PowerNorm) show that in NLP the mean and
variance of a batch differ from step to step far more than in vision, and that BN's running estimates then
disagree with what training normalized by. This probe measures that, per BN layer, from what each layer itself
used: a training-mode BatchNorm moves its running estimate toward the batch statistic by `momentum`,

    running_new = (1 - m) * running_old + m * batch_stat,

so batch_stat = (running_new - (1 - m) * running_old) / m is read back exactly, whatever positions the layer
pooled (all of them for the naive BN, the real tokens only for the masked one). Over the last `window` training
steps it records, averaged over the layer's channels, with each channel scaled by its final running estimate:
- `probe/bn/mean_std/<layer>`: the standard deviation over steps of the batch mean, / sqrt(running_var + eps);
- `probe/bn/var_std/<layer>`: the standard deviation over steps of the batch variance, / running_var;
- `probe/bn/mean_dev/<layer>`, `probe/bn/var_dev/<layer>`: the mean |batch - running| over steps (the running
  estimate before that step's update), scaled the same way: Shen et al.'s "deviation" of batch statistics.
Each also as `/mean` over layers. A constant batch gives 0 fluctuation; N(0, 1) batches of n values per
channel give a mean_std of about 1/sqrt(n).
"""

from __future__ import annotations

from collections import deque

import lightning as L
import torch
from torch.nn.modules.batchnorm import _BatchNorm

from .naming import layer_label
from .probes import _with_mean
from .record import log_on_rank_zero


def bn_label(path: str) -> str:
    """'net.blocks.layers.2.ff.inner_norm' -> 'l2.ff.inner_norm'; a path outside a layer stack stays itself."""
    label = layer_label(path)
    if "layers." not in path:
        return path.removeprefix("net.")
    rest = path.split("layers.", 1)[1].split(".", 1)
    return f"{label}.{rest[1]}" if len(rest) > 1 else label


class BatchNormStatsProbe(L.Callback):
    def __init__(self, window: int = 100) -> None:
        if window < 2:
            raise ValueError(f"window must be >= 2 steps (a standard deviation over steps), got {window}")
        self.window = window
        self.samples: dict[str, deque] = {}
        self._handles: list = []
        self._before: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        self.final: dict[str, tuple[torch.Tensor, torch.Tensor, float]] = {}

    # ---- hooks on every BatchNorm that keeps running statistics ----------------------------------------------
    def attach(self, module: torch.nn.Module) -> None:
        for path, m in module.named_modules():
            if isinstance(m, _BatchNorm) and m.track_running_stats:
                label = bn_label(path)
                self.samples[label] = deque(maxlen=self.window)
                self._handles.append(m.register_forward_pre_hook(self._pre(label)))
                self._handles.append(m.register_forward_hook(self._post(label)))

    def detach(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _pre(self, label):
        def hook(module, args):
            if module.training:
                self._before[label] = (module.running_mean.detach().clone(), module.running_var.detach().clone())

        return hook

    def _post(self, label):
        def hook(module, args, output):
            before = self._before.pop(label, None)
            if before is None or not module.training:
                return
            m = module.momentum if module.momentum is not None else 1.0 / float(module.num_batches_tracked)
            old_mean, old_var = before
            mean = (module.running_mean.detach() - (1 - m) * old_mean) / m
            var = (module.running_var.detach() - (1 - m) * old_var) / m
            new_var = module.running_var.detach()
            self.samples[label].append(torch.stack([mean, var, old_mean, old_var, new_var]).double().cpu())

        return hook

    # ---- Lightning -----------------------------------------------------------------------------------------
    def on_fit_start(self, trainer, pl_module) -> None:
        self.attach(pl_module)

    def on_fit_end(self, trainer, pl_module) -> None:
        self.detach()
        log_on_rank_zero(trainer, self.result_record()["metrics"])

    def summary(self) -> dict[str, dict[str, float]]:
        """stat -> layer -> value, over the samples kept (layers with fewer than 2 steps are left out)."""
        out: dict[str, dict[str, float]] = {"mean_std": {}, "var_std": {}, "mean_dev": {}, "var_dev": {}}
        for label, rows in self.samples.items():
            if len(rows) < 2:
                continue
            s = torch.stack(list(rows))  # (steps, 5, channels)
            mean, var, old_mean, old_var = s[:, 0], s[:, 1], s[:, 2], s[:, 3]
            eps = 1e-5
            final_var = s[-1, 4].clamp(min=eps)  # the running variance after the last step kept
            scale = (final_var + eps).sqrt()
            out["mean_std"][label] = float((mean.std(0) / scale).mean())
            out["var_std"][label] = float((var.std(0) / final_var).mean())
            out["mean_dev"][label] = float(((mean - old_mean).abs() / (old_var + eps).sqrt()).mean())
            out["var_dev"][label] = float(((var - old_var).abs() / old_var.clamp(min=eps)).mean())
        return out

    def result_record(self) -> dict:
        metrics: dict[str, float] = {}
        for stat, per_layer in self.summary().items():
            metrics.update(_with_mean(f"probe/bn/{stat}", per_layer))
        return {"metrics": metrics}
