"""Probes: Lightning callbacks that measure the inside of a model while it trains (`callbacks=probes`, or any lab
config). They log `probe/<quantity>/<layer or group>` and keep it for result.json (`result_record`); "init" is the
model before its first optimizer step."""

from __future__ import annotations

import math
import re

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_info

from zoo.core import MultiHeadAttention
from zoo.core.block import Block

from .attention_stats import summarize
from .batches import evaluating, first_val_batch, forward_batch
from .naming import attention_modules, layer_label, param_group
from .record import log_on_rank_zero

# Pieces of fused projection matrices, in row order: their gradient norms are reported per piece.
_FUSED = {"attn.qkv": ("attn.q", "attn.k", "attn.v"), "attn.kv": ("attn.k", "attn.v"), "attn.qv": ("attn.qk", "attn.v")}


class _Probe(L.Callback):
    # the per-layer series result_record adds: `<series>@init` / `@last` of the values under `series_prefix`
    series = series_prefix = ""

    def __init__(self, every_n_steps: int = 100) -> None:
        if every_n_steps <= 0:
            raise ValueError(f"every_n_steps must be a positive number of steps, got {every_n_steps}")
        self.every_n_steps = every_n_steps
        self.history: dict[int, dict[str, float]] = {}

    def _due(self, step: int) -> bool:
        return step % self.every_n_steps == 0 and step not in self.history

    def _log(self, trainer: L.Trainer, values: dict[str, float]) -> None:
        step = trainer.global_step
        self.history[step] = {**self.history.get(step, {}), **values}
        log_on_rank_zero(trainer, values)

    def result_record(self) -> dict:
        """Every logged step, each metric's first (@init) and last (@last) value, and the per-layer series in depth
        order at step 0 and at the last logged step."""
        metrics: dict[str, float] = {}
        series: dict[str, list[float]] = {}
        if self.history:
            first, last = min(self.history), max(self.history)
            if first == 0:
                metrics.update({f"{k}@init": v for k, v in self.history[first].items()})
                series[f"{self.series}@init"] = layers_in_order(self.history[first], self.series_prefix)
            metrics.update({f"{k}@last": v for k, v in self.history[last].items()})
            series[f"{self.series}@last"] = layers_in_order(self.history[last], self.series_prefix)
        record = {"probes": {str(s): v for s, v in sorted(self.history.items())}, "metrics": metrics}
        if self.series and any(series.values()):
            record["series"] = {k: v for k, v in series.items() if v}
        return record


class BatchProbe(_Probe):
    """A probe of one real validation batch, at the start of training, every `every_n_steps` steps and at the end;
    off (with a note) for a model without a `needs` module."""

    needs: type = Block
    _batch = None

    def measure(self, pl_module, batch) -> dict[str, float]:
        raise NotImplementedError

    def _record(self, trainer, pl_module) -> None:
        self._log(trainer, self.measure(pl_module, self._batch))

    def on_train_start(self, trainer, pl_module) -> None:
        if not any(isinstance(m, self.needs) for m in pl_module.modules()):
            net = type(pl_module.net).__name__
            rank_zero_info(f"{type(self).__name__}: {net} has no {self.needs.__name__}; nothing to probe")
            return
        self._batch = first_val_batch(trainer, pl_module)
        self._record(trainer, pl_module)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self._batch is not None and self._due(trainer.global_step):
            self._record(trainer, pl_module)

    def on_train_end(self, trainer, pl_module) -> None:
        if self._batch is not None and trainer.global_step not in self.history:
            self._record(trainer, pl_module)  # the final weights, whatever every_n_steps was


def _with_mean(prefix: str, per_layer: dict[str, float]) -> dict[str, float]:
    out = {f"{prefix}/{layer}": v for layer, v in per_layer.items()}
    if per_layer:
        out[f"{prefix}/mean"] = sum(per_layer.values()) / len(per_layer)
    return out


class AttentionProbe(BatchProbe):
    """Per attention layer: entropy, max probability, diagonal (self) mass and the variance of the logits."""

    needs = MultiHeadAttention

    @torch.no_grad()
    def measure(self, pl_module, batch) -> dict[str, float]:
        return measure_attention(pl_module, batch)


def measure_attention(pl_module: L.LightningModule, batch) -> dict[str, float]:
    """probe/attn/<stat>/<layer> (and /mean over layers) from one forward pass in eval mode."""
    attns = attention_modules(pl_module)
    if not attns:
        raise ValueError(f"{type(pl_module).__name__} has no zoo MultiHeadAttention module to probe")
    saved = {label: m.record_weights for label, m in attns.items()}
    per_stat: dict[str, dict[str, float]] = {}
    try:
        for m in attns.values():
            m.record_weights = True
        with evaluating(pl_module):
            forward_batch(pl_module, batch)
        for label, m in attns.items():
            if m.last_weights is None:
                continue  # not reached by this forward (e.g. a decoder in an encoder-only pass)
            for stat, value in summarize(m.last_weights, getattr(m, "last_logits", None)).items():
                per_stat.setdefault(stat, {})[label] = value
    finally:
        for label, m in attns.items():
            m.record_weights = saved[label]
            m.last_weights = None
            if hasattr(m, "last_logits"):
                m.last_logits = None
    values: dict[str, float] = {}
    for stat, per_layer in per_stat.items():
        values.update(_with_mean(f"probe/attn/{stat}", per_layer))
    return values


class GradNormProbe(_Probe):
    """L2 norm of the gradient per layer (probe/grad/<layer>) and per parameter group (probe/grad_group/<group>),
    read before the optimizer step (and before clipping) at step 0, every `every_n_steps` steps and at the last step
    (`@last` is the trained model's gradient)."""

    series, series_prefix = "grad_by_layer", "probe/grad/"
    _last_step: int | None = None

    def on_train_start(self, trainer, pl_module) -> None:
        steps = trainer.estimated_stepping_batches  # max_steps, or the epochs' batches; inf when neither bounds it
        self._last_step = int(steps) - 1 if math.isfinite(steps) else None

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        step = trainer.global_step
        if self._due(step) or (step == self._last_step and step not in self.history):
            self._log(trainer, gradient_norms(pl_module))


def layers_in_order(values: dict[str, float], prefix: str, stack: str = "") -> list[float]:
    """The values of layers l0, l1, ... of one stack (keys `<prefix><stack>l<i>`) in depth order."""
    pattern = re.compile(re.escape(stack) + r"l(\d+)")
    layers = {}
    for key, value in values.items():
        if key.startswith(prefix) and (m := pattern.fullmatch(key[len(prefix) :])):
            layers[int(m.group(1))] = value
    return [layers[i] for i in sorted(layers)]


def gradient_norms(module: torch.nn.Module) -> dict[str, float]:
    attn_paths = {path for path, m in module.named_modules() if m in set(attention_modules(module).values())}
    layers: dict[str, float] = {}
    groups: dict[str, float] = {}
    for path, p in module.named_parameters():
        if p.grad is None:
            continue
        grad = p.grad.detach().float()
        layer = layer_label(path) if "layers." in path else None
        if layer is not None:
            layer = layer.removesuffix(".cross")
            layers[layer] = layers.get(layer, 0.0) + float(grad.square().sum())
        group = param_group(path, attn_paths)
        pieces = _FUSED.get(group)
        chunks = grad.chunk(len(pieces), dim=0) if pieces else (grad,)
        for name, chunk in zip(pieces or (group,), chunks):
            groups[name] = groups.get(name, 0.0) + float(chunk.square().sum())
    values = {f"probe/grad/{k}": math.sqrt(v) for k, v in layers.items()}
    for stack in sorted({label[: label.rindex("l")] for label in layers}):
        depth = layers_in_order(values, "probe/grad/", stack)
        if len(depth) >= 2 and depth[-1] > 0:
            # < 1: less gradient reaches the stack's first layer than its last: vanishing toward the input, or
            # post-LN's large gradients near the output (Xiong et al. 2020); about 1 for pre-LN at init
            values[f"probe/grad/{stack}first_over_last"] = depth[0] / depth[-1]
    values.update({f"probe/grad_group/{k}": math.sqrt(v) for k, v in groups.items()})
    values["probe/grad/total"] = math.sqrt(sum(groups.values()))
    return values
