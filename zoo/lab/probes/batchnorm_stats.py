"""BatchNormStatsProbe: how much each BatchNorm layer's batch statistics fluctuate during training (Shen et al. 2020,
PowerNorm: far more in NLP than in vision). A training-mode BatchNorm moves its running estimate by `momentum`, so
batch_stat = (running_new - (1 - m) * running_old) / m is read back exactly from what the layer itself used. Over the
last `window` steps, averaged over channels and scaled by the final running estimate: `probe/bn/mean_std/<layer>`
and `probe/bn/var_std/<layer>` (the spread over steps of the batch mean and variance), `probe/bn/mean_dev/<layer>`
and `probe/bn/var_dev/<layer>` (the mean |batch - running|); each also as `/mean` over layers."""

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
