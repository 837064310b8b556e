"""Inference time with and without BatchNorm folded into the following linear layer (the BN-ViT question).

In eval mode a BatchNorm is a fixed per-channel affine map, so it can be merged into the next linear layer's
weights and bias (`zoo.core.bn_fold.fold_batchnorms`); the folded model computes the same logits with one layer
fewer per norm. A LayerNorm depends on each token's own statistics and cannot be folded: a LayerNorm model is
timed as it is (folded = unfolded). The fold is checked, not trusted: the largest logit difference is recorded
and a difference above `tolerance` is an error.

- `BatchNormFoldProbe` (a callback): after training, on the trained model and one real validation batch.
- `bn_fold` (a `measure` function): the same on a freshly built model, without training.
Both record `lab/infer_ms` (median eval forward of the batch as trained), `lab/infer_ms_folded` (the two timed
interleaved in one process, each with its spread and contention flag: zoo/lab/measure/timing.py),
`lab/fold_speedup` (unfolded / folded time), `lab/fold_max_diff` and `lab/batchnorms` (how many were folded); with
`compare_with`, a twin of the model with those config fields timed in the same rounds: `lab/infer_ms_compared` and
`lab/compared_over_folded` (its time over the folded model's).
"""

from __future__ import annotations

import copy
import dataclasses

import lightning as L
import torch
from torch.nn.modules.batchnorm import _BatchNorm

from ..probes.record import log_on_rank_zero
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
    `compare_with` (config fields, e.g. {norm: layernorm, ff_inner_norm: null}): a twin of `net` with them, timed in
    the same rounds, so that "folded vs the LayerNorm model" is measured in one process, not across two jobs."""
    from zoo.core.bn_fold import fold_batchnorms

    was_training = net.training
    net.eval()
    try:
        count = sum(isinstance(m, _BatchNorm) for m in net.modules())
        folded = fold_batchnorms(copy.deepcopy(net)).eval()
        reference, logits = net(images), folded(images)
        diff = float((reference.float() - logits.float()).abs().max())
        if diff > tolerance:
            raise ValueError(
                f"folding the BatchNorms changed the logits by {diff:.3g} (> {tolerance:g}); the fold is wrong"
            )
        # the two models interleaved in one process (zoo/lab/measure/timing.py): their ratio is not a ratio of two
        # moments
        sync = (lambda: torch.cuda.synchronize(images.device)) if images.device.type == "cuda" else None
        arms = {"plain": _forward(net, images), "folded": _forward(folded, images)}
        if compare_with is not None:
            # an untrained twin: the weights' values do not change what a forward pass costs
            twin = type(net)(dataclasses.replace(net.config, **compare_with)).to(images.device).eval()
            arms["compared"] = _forward(twin, images)
        found = timing.interleave(arms, rounds=repeats, warmup=warmup, sync=sync)
    finally:
        net.train(was_training)
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


class BatchNormFoldProbe(L.Callback):
    def __init__(self, repeats: int = 10, batch_size: int | None = None, compare_with: dict | None = None) -> None:
        if repeats <= 0:
            raise ValueError(f"repeats must be positive, got {repeats}")
        self.repeats, self.batch_size, self.compare_with = repeats, batch_size, compare_with
        self.metrics: dict[str, float] = {}

    def on_train_end(self, trainer, pl_module) -> None:
        from ..probes.batches import first_val_batch

        images = first_val_batch(trainer, pl_module)[0]
        if self.batch_size is not None:
            images = images[: self.batch_size]
        self.metrics = fold_timing(pl_module.net, images, repeats=self.repeats, compare_with=self.compare_with)
        log_on_rank_zero(trainer, self.metrics)

    def result_record(self) -> dict:
        return {"metrics": dict(self.metrics)}


def bn_fold(net, datamodule, *, batch_size: int = 100, repeats: int = 10, device: str = "cpu") -> tuple[dict, dict]:
    """measure: the fold's equality and speed on real validation images, for a model as built (untrained)."""
    images = next(iter(datamodule.val_dataloader()))[0][:batch_size].to(device)
    net.to(device)
    metrics = fold_timing(net, images, repeats=repeats)
    return metrics, {"metrics": metrics}
