"""Inference time with and without BatchNorm folded into the following linear layer (zoo.core.bn_fold; a
LayerNorm model is timed as it is). The fold is checked: a logit difference above `tolerance` is an error.
`BatchNormFoldProbe` times the trained model on a validation batch, `bn_fold` (a `measure` function) a model as built:
`lab/infer_ms`, `lab/infer_ms_folded` (interleaved, zoo/lab/measure/timing.py), `lab/fold_speedup`,
`lab/fold_max_diff`, `lab/batchnorms`; with `compare_with`, `lab/infer_ms_compared` and `lab/compared_over_folded`."""

from __future__ import annotations

import copy
import dataclasses

import torch
from torch.nn.modules.batchnorm import _BatchNorm

from ..probes.batches import evaluating, first_val_batch
from ..probes.record import Recorder
from . import timing


def _forward(net, images):
    def run():
        net(images)

    return run


@torch.no_grad()
def fold_timing(
    net: torch.nn.Module,
    images: torch.Tensor,
    *,
    repeats: int = 10,
    warmup: int = 2,
    tolerance: float = 1e-5,
    compare_with: dict | None = None,
) -> dict[str, float]:
    """Time `net` (eval mode) on `images` before and after folding its BatchNorms; `net` itself is not changed.
    `compare_with` (config fields, e.g. {norm: layernorm}): an untrained twin with them, timed in the same rounds."""
    from zoo.core.bn_fold import fold_batchnorms

    with evaluating(net):
        count = sum(isinstance(m, _BatchNorm) for m in net.modules())
        folded = fold_batchnorms(copy.deepcopy(net)).eval()
        reference, logits = net(images), folded(images)
        diff = float((reference.float() - logits.float()).abs().max())
        if diff > tolerance:
            raise ValueError(
                f"folding the BatchNorms changed the logits by {diff:.3g} (> {tolerance:g}); the fold is wrong"
            )
        sync = (lambda: torch.cuda.synchronize(images.device)) if images.device.type == "cuda" else None
        arms = {"plain": _forward(net, images), "folded": _forward(folded, images)}
        if compare_with is not None:
            twin = type(net)(dataclasses.replace(net.config, **compare_with)).to(images.device).eval()
            arms["compared"] = _forward(twin, images)
        found = timing.interleave(arms, rounds=repeats, warmup=warmup, sync=sync)
    plain, folded_t = found["plain"], found["folded"]
    compared = {}
    if "compared" in found:
        compared = {
            **found["compared"].metrics("lab/infer_ms_compared"),
            **timing.ratio("lab/compared_over_folded", found["compared"], folded_t),
        }
    return {
        **compared,
        **plain.metrics("lab/infer_ms"),
        **folded_t.metrics("lab/infer_ms_folded"),
        "lab/fold_speedup": plain.median / folded_t.median,
        "lab/fold_max_diff": diff,
        "lab/batchnorms": float(count),
    }


class BatchNormFoldProbe(Recorder):
    def __init__(self, repeats: int = 10, batch_size: int | None = None, compare_with: dict | None = None) -> None:
        if repeats <= 0:
            raise ValueError(f"repeats must be positive, got {repeats}")
        super().__init__()
        self.repeats, self.batch_size, self.compare_with = repeats, batch_size, compare_with

    def on_train_end(self, trainer, pl_module) -> None:
        images = first_val_batch(trainer, pl_module)[0]
        if self.batch_size is not None:
            images = images[: self.batch_size]
        self.record(trainer, fold_timing(pl_module.net, images, repeats=self.repeats, compare_with=self.compare_with))


def bn_fold(net, datamodule, *, batch_size: int = 100, repeats: int = 10, device: str = "cpu") -> tuple[dict, dict]:
    """measure: the fold's equality and speed on real validation images, for a model as built (untrained)."""
    images = next(iter(datamodule.val_dataloader()))[0][:batch_size].to(device)
    net.to(device)
    metrics = fold_timing(net, images, repeats=repeats)
    return metrics, {"metrics": metrics}
